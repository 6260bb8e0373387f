//! Which HSA runtime a run uses (`--hsa-runtime`): ditto's CPU runtime
//! (where it lives: `DITTO_CPU_RUNTIME_DIR`, else beside the `ditto`
//! executable) or the system's ROCm, `auto` picking by `/dev/kfd`, and
//! what to say when `auto` picked the CPU runtime. Owns the choice only:
//! the application finds the runtime through its LD_LIBRARY_PATH
//! (`launch`), the collector loads it (`collector::hsa_runtime`).

use std::path::{Path, PathBuf};

/// File name (SONAME) of the HSA runtime.
pub const HSA_RUNTIME_SONAME: &str = "libhsa-runtime64.so.1";

/// `--hsa-runtime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeChoice {
    /// ditto's CPU HSA runtime (no GPU needed).
    Cpu,
    /// The system's ROCm runtime (an AMD GPU and /dev/kfd).
    System,
    /// system when /dev/kfd exists, else cpu.
    Auto,
}

/// The runtime chosen for this invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolvedRuntime {
    /// ditto's CPU runtime in `dir` (holding libhsa-runtime64.so.1).
    Cpu {
        dir: PathBuf,
    },
    System,
}

impl ResolvedRuntime {
    /// What dlopen gets: an absolute path for the CPU runtime, the SONAME
    /// (searched the usual way) for the system's.
    pub fn library(&self) -> PathBuf {
        match self {
            ResolvedRuntime::Cpu { dir } => dir.join(HSA_RUNTIME_SONAME),
            ResolvedRuntime::System => PathBuf::from(HSA_RUNTIME_SONAME),
        }
    }
    /// Directory to put first in the application's LD_LIBRARY_PATH.
    pub fn library_dir(&self) -> Option<&Path> {
        match self {
            ResolvedRuntime::Cpu { dir } => Some(dir),
            ResolvedRuntime::System => None,
        }
    }
}

/// Why `--hsa-runtime` names no usable runtime.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "ditto's CPU HSA runtime was not found at {0}: build it with `cargo build --workspace` \
         (it lands in target/<profile>/hsa-cpu/) or set DITTO_CPU_RUNTIME_DIR"
    )]
    CpuRuntimeMissing(PathBuf),
    #[error("cannot find the ditto executable's directory: {0}")]
    NoExecutable(std::io::Error),
}

/// Where ditto's CPU runtime lives: `$DITTO_CPU_RUNTIME_DIR`, else
/// `<dir of the ditto executable>/hsa-cpu`.
pub fn cpu_runtime_dir() -> Result<PathBuf, ResolveError> {
    if let Some(dir) = std::env::var_os("DITTO_CPU_RUNTIME_DIR") {
        return Ok(PathBuf::from(dir));
    }
    Ok(crate::executable_dir()
        .map_err(ResolveError::NoExecutable)?
        .join("hsa-cpu"))
}

/// What `auto` says when it picked the CPU runtime, once an HSA
/// application connects ([`cpu_notice`]), as an info line of the log.
const CPU_NOTICE: &str = "no AMD GPU found (/dev/kfd is absent): the HSA application \
                          runs on ditto's CPU HSA runtime (--hsa-runtime cpu)";

/// The line to say when an HSA application connects: where `auto` picked
/// the CPU runtime, that it did. Said then, not at start: a CUDA
/// application never meets an HSA runtime and hears nothing of one.
pub fn cpu_notice(choice: RuntimeChoice, runtime: &ResolvedRuntime) -> Option<&'static str> {
    (choice == RuntimeChoice::Auto && matches!(runtime, ResolvedRuntime::Cpu { .. }))
        .then_some(CPU_NOTICE)
}

/// Resolves `--hsa-runtime`: `auto` picks the system runtime when
/// `/dev/kfd` exists, else the CPU runtime ([`cpu_notice`] is what to say
/// of it). Whether the CPU runtime is there is not checked here: a CUDA
/// application never needs it, so a run asks [`ResolvedRuntime::missing`]
/// only when an HSA application is involved, and a replay of an HSA
/// dispatch at once.
pub fn resolve(choice: RuntimeChoice) -> Result<ResolvedRuntime, ResolveError> {
    let cpu = || -> Result<ResolvedRuntime, ResolveError> {
        Ok(ResolvedRuntime::Cpu {
            dir: cpu_runtime_dir()?,
        })
    };
    match choice {
        RuntimeChoice::Cpu => cpu(),
        RuntimeChoice::System => Ok(ResolvedRuntime::System),
        RuntimeChoice::Auto if Path::new("/dev/kfd").exists() => Ok(ResolvedRuntime::System),
        RuntimeChoice::Auto => cpu(),
    }
}

impl ResolvedRuntime {
    /// Where the CPU runtime was chosen and its library is not there, what
    /// to say (where it was looked for and how to get it).
    pub fn missing(&self) -> Option<ResolveError> {
        let library = self.library();
        (matches!(self, ResolvedRuntime::Cpu { .. }) && !library.exists())
            .then_some(ResolveError::CpuRuntimeMissing(library))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_automatic_choice_of_the_cpu_runtime_is_announced() {
        let cpu = ResolvedRuntime::Cpu {
            dir: PathBuf::from("/x"),
        };
        assert_eq!(cpu_notice(RuntimeChoice::Auto, &cpu), Some(CPU_NOTICE));
        assert_eq!(cpu_notice(RuntimeChoice::Cpu, &cpu), None);
        assert_eq!(
            cpu_notice(RuntimeChoice::Auto, &ResolvedRuntime::System),
            None
        );
    }

    #[test]
    fn system_runtime_is_searched_by_soname_and_cpu_by_absolute_path() {
        assert_eq!(
            ResolvedRuntime::System.library(),
            PathBuf::from("libhsa-runtime64.so.1")
        );
        let cpu = ResolvedRuntime::Cpu {
            dir: "/opt/x/hsa-cpu".into(),
        };
        assert_eq!(
            cpu.library(),
            PathBuf::from("/opt/x/hsa-cpu/libhsa-runtime64.so.1")
        );
        assert_eq!(cpu.library_dir(), Some(Path::new("/opt/x/hsa-cpu")));
    }

    #[test]
    fn a_missing_cpu_runtime_is_said_only_when_asked_and_never_of_the_system_s() {
        let dir = tempfile::tempdir().unwrap();
        let cpu = ResolvedRuntime::Cpu {
            dir: dir.path().to_path_buf(),
        };
        let said = cpu
            .missing()
            .expect("no library in an empty directory")
            .to_string();
        assert!(
            said.contains(&dir.path().join(HSA_RUNTIME_SONAME).display().to_string())
                && said.contains("DITTO_CPU_RUNTIME_DIR"),
            "{said}"
        );
        std::fs::write(dir.path().join(HSA_RUNTIME_SONAME), b"").unwrap();
        assert!(cpu.missing().is_none());
        assert!(ResolvedRuntime::System.missing().is_none());
    }
}

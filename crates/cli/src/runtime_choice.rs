//! Which HSA runtime a run uses (`--hsa-runtime`): ditto's CPU runtime
//! (where it lives: `DITTO_CPU_RUNTIME_DIR`, else beside the `ditto`
//! executable), the system's ROCm, or the system's ROCm in its own model
//! mode on ditto's model GPU (`model`: the model library beside `ditto`
//! or `DITTO_MODEL_GPU_LIB`, the topology ditto writes or the user's,
//! `DITTO_MODEL_TOPOLOGY`, checked by `model_preflight`), `auto` picking by
//! `/dev/kfd`, and what to say when `auto` picked the CPU runtime. Owns
//! the choice only: the application finds the runtime through its
//! LD_LIBRARY_PATH and, for the model, HSA_MODEL_LIB and
//! HSA_MODEL_TOPOLOGY (`launch`); the collector loads it
//! (`collector::hsa_runtime`).

use crate::model_preflight;
use std::path::{Path, PathBuf};

/// File name (SONAME) of the HSA runtime.
pub const HSA_RUNTIME_SONAME: &str = "libhsa-runtime64.so.1";

/// CLR's threshold for copying pageable memory by pinning it.
pub const PINNED_TRANSFERS_VAR: &str = "GPU_PINNED_MIN_XFER_SIZE";

/// `--hsa-runtime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeChoice {
    /// ditto's CPU HSA runtime (no GPU needed).
    Cpu,
    /// The system's ROCm runtime (an AMD GPU and /dev/kfd).
    System,
    /// The system's ROCm runtime (7.2 or later) in its own model mode, on
    /// ditto's model GPU: real ROCr and HIP, no GPU needed.
    Model,
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
    /// The system's ROCr in model mode: the model library `gpu` and the
    /// topology directory `topology` it is given.
    Model {
        gpu: PathBuf,
        topology: PathBuf,
    },
}

impl ResolvedRuntime {
    /// What dlopen gets: an absolute path for the CPU runtime, the SONAME
    /// (searched the usual way) for the system's.
    pub fn library(&self) -> PathBuf {
        match self {
            ResolvedRuntime::Cpu { dir } => dir.join(HSA_RUNTIME_SONAME),
            ResolvedRuntime::System | ResolvedRuntime::Model { .. } => {
                PathBuf::from(HSA_RUNTIME_SONAME)
            }
        }
    }
    /// Variables the application needs beyond its library path: the model
    /// GPU's for ROCr's model mode.
    pub fn environment(&self) -> Vec<(String, String)> {
        match self {
            // Signals without interrupt events: ROCr 7.2.4's thunk aborts
            // when the model sets an event the waiter already destroyed.
            ResolvedRuntime::Model { gpu, topology } => {
                let mut vars = vec![
                    ("HSA_MODEL_LIB".into(), gpu.display().to_string()),
                    ("HSA_MODEL_TOPOLOGY".into(), topology.display().to_string()),
                    ("HSA_ENABLE_INTERRUPT".into(), "0".into()),
                ];
                // HIP copies pageable host memory of more than 1 MiB by
                // pinning it (a userptr registration), which the thunk's
                // model mode lacks: it aborts the process. At 4096, HIP
                // 7.2.4 stages such copies instead (seen up to 512 MiB).
                // A value the user set is kept.
                if std::env::var_os(PINNED_TRANSFERS_VAR).is_none() {
                    vars.push((PINNED_TRANSFERS_VAR.into(), "4096".into()));
                }
                vars
            }
            _ => Vec::new(),
        }
    }
    /// Directory to put first in the application's LD_LIBRARY_PATH.
    pub fn library_dir(&self) -> Option<&Path> {
        match self {
            ResolvedRuntime::Cpu { dir } => Some(dir),
            ResolvedRuntime::System | ResolvedRuntime::Model { .. } => None,
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
    #[error(
        "ditto's model GPU was not found at {0}: build it with `cargo build --workspace` (it \
         lands beside `ditto` as libditto_hsa_model.so) or set DITTO_MODEL_GPU_LIB"
    )]
    ModelGpuMissing(PathBuf),
    #[error(
        "--hsa-runtime model needs the system's ROCm runtime ({HSA_RUNTIME_SONAME}), which \
         could not be loaded: {0}; install ROCm 7.2 or later (Debian: libhsa-runtime64-1 \
         from experimental), or use --hsa-runtime cpu"
    )]
    NoSystemRocr(String),
    #[error(
        "--hsa-runtime model: the system's ROCm runtime {0} has no model mode (its thunk \
         never reads HSA_MODEL_TOPOLOGY); ROCr 7.2 is the first with one (ROCm 6.4 and 5.2 \
         have none): install ROCm 7.2 or later, or use --hsa-runtime cpu"
    )]
    NoModelMode(String),
    #[error("--hsa-runtime model: writing the model GPU's topology into {0}: {1}")]
    Topology(PathBuf, std::io::Error),
    /// The user's topology (`DITTO_MODEL_TOPOLOGY`), refused by real ROCr
    /// (`model_preflight`): the whole message.
    #[error("{0}")]
    TopologyRejected(String),
}

/// Where ditto's model GPU lives: `$DITTO_MODEL_GPU_LIB`, else
/// `<dir of the ditto executable>/libditto_hsa_model.so`.
fn model_gpu_library() -> Result<PathBuf, ResolveError> {
    let lib = match std::env::var_os("DITTO_MODEL_GPU_LIB") {
        Some(lib) => PathBuf::from(lib),
        None => crate::executable_dir()
            .map_err(ResolveError::NoExecutable)?
            .join("libditto_hsa_model.so"),
    };
    if lib.is_file() {
        Ok(lib)
    } else {
        Err(ResolveError::ModelGpuMissing(lib))
    }
}

/// Whether the system's ROCr has a model mode: its thunk (linked into
/// libhsa-runtime64, its symbols hidden) reads `HSA_MODEL_TOPOLOGY`, so
/// the library's file holds that name (ROCr 7.2 on). Loads the library
/// without initialising it (hsa_init is never called here) to learn which
/// file the loader picks.
fn check_model_mode() -> Result<(), ResolveError> {
    let name = std::ffi::CString::new(HSA_RUNTIME_SONAME).unwrap_or_default();
    // SAFETY: dlopen of a NUL-terminated name; the handle is kept (ROCr is
    // never unloaded, as its own static objects expect).
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a NUL-terminated message or null.
        let why = unsafe { libc::dlerror() };
        let why = if why.is_null() {
            "not found".to_string()
        } else {
            // SAFETY: as above.
            unsafe { std::ffi::CStr::from_ptr(why) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(ResolveError::NoSystemRocr(why));
    }
    // SAFETY: dlsym with a live handle and a NUL-terminated name.
    let init = unsafe { libc::dlsym(handle, c"hsa_init".as_ptr()) };
    let path = library_path(init);
    let _ = SYSTEM_ROCR_FILE.set(PathBuf::from(&path));
    let has_model_mode = std::fs::read(&path)
        .map(|bytes| bytes.windows(MODEL_VAR.len()).any(|w| w == MODEL_VAR))
        .unwrap_or(false);
    if has_model_mode {
        Ok(())
    } else {
        Err(ResolveError::NoModelMode(path))
    }
}

/// The file of the system's ROCr, once `check_model_mode` loaded it.
static SYSTEM_ROCR_FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The file of the system's ROCr that `--hsa-runtime model` found, if it
/// was looked for in this process.
pub(crate) fn system_rocr_file() -> Option<PathBuf> {
    SYSTEM_ROCR_FILE.get().cloned()
}

/// The variable ROCr's thunk reads to enter model mode.
const MODEL_VAR: &[u8] = b"HSA_MODEL_TOPOLOGY";

/// The file a symbol of a loaded library lies in (dladdr), for messages.
fn library_path(symbol: *mut libc::c_void) -> String {
    // SAFETY: dladdr fills `info` for any address; zeroed is its valid start.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if symbol.is_null()
        || unsafe { libc::dladdr(symbol, &mut info) } == 0
        || info.dli_fname.is_null()
    {
        return HSA_RUNTIME_SONAME.to_string();
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned()
}

/// GPUs of the model topology: `DITTO_MODEL_GPUS` (1 to 8), else 1.
fn model_gpus() -> u32 {
    std::env::var("DITTO_MODEL_GPUS")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|n| (1..=8).contains(n))
        .unwrap_or(1)
}

/// `<tmp>/ditto-model-<uid>/`: created 0700, checked to be this user's
/// only and no link. Holds ditto's topologies and the marks of user
/// topologies that passed `model_preflight`.
pub(crate) fn private_model_dir() -> Result<PathBuf, ResolveError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let base = std::env::temp_dir().join(format!("ditto-model-{uid}"));
    let fail = |e: std::io::Error| ResolveError::Topology(base.clone(), e);
    match std::fs::DirBuilder::new().mode(0o700).create(&base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(fail(e)),
    }
    let meta = std::fs::symlink_metadata(&base).map_err(fail)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(fail(std::io::Error::other(format!(
            "{} is not a directory of this user's only (a link, another owner, or open to others); \
             remove it",
            base.display()
        ))));
    }
    Ok(base)
}

/// The model topology, in a directory of this user's only
/// ([`private_model_dir`]), named by what it describes (GPUs, cores,
/// memory), so that it is written once and never rewritten while another
/// run's ROCr reads it: it is made under a temporary name and renamed into
/// place.
fn model_topology() -> Result<PathBuf, ResolveError> {
    let topology = ditto_hsa_model::topology::Topology::for_this_machine(model_gpus());
    let base = private_model_dir()?;
    let dir = base.join(format!(
        "gpus-{}-cores-{}-memory-{}",
        topology.gpus, topology.cpu_cores, topology.system_memory
    ));
    let fail = |e: std::io::Error| ResolveError::Topology(dir.clone(), e);
    if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return Ok(dir);
    }
    let partial = tempfile::Builder::new()
        .prefix(".topology-")
        .tempdir_in(&base)
        .map_err(fail)?;
    topology.write(partial.path()).map_err(fail)?;
    match std::fs::rename(partial.path(), &dir) {
        Ok(()) => {}
        // Another run put the same topology in place first.
        Err(_) if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) => {}
        Err(e) => return Err(fail(e)),
    }
    Ok(dir)
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
        RuntimeChoice::Model => {
            let gpu = model_gpu_library()?;
            check_model_mode()?;
            let topology = match std::env::var_os(model_preflight::TOPOLOGY_VAR) {
                Some(dir) => {
                    let dir = std::path::absolute(&dir).unwrap_or_else(|_| PathBuf::from(dir));
                    model_preflight::check(
                        &gpu,
                        &dir,
                        system_rocr_file(),
                        private_model_dir().ok(),
                    )
                    .map_err(|r| ResolveError::TopologyRejected(r.0))?;
                    dir
                }
                None => model_topology()?,
            };
            Ok(ResolvedRuntime::Model { gpu, topology })
        }
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

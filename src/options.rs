//! The tool's options, read once from the environment at start-up
//! (`OnLoad` or `InitializeInjection`; set by `ditto run` and
//! scripts/ditto-run). Owns their parsing and defaults;
//! never reads the environment again after start-up.

use crate::log::LogLevel;
use ditto_kernels::{ArgSizes, ParamType, parse_arg_types};
use ditto_protocol::{CaptureSet, DispatchSelection};
use std::path::PathBuf;
use std::time::Duration;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(30_000);
/// Default size of a connection's staging file (`DITTO_STAGING_MIB`). Its
/// pages are allocated as they are first written.
pub const DEFAULT_STAGING_BYTES: u64 = 64 << 20;
/// Largest `DITTO_STAGING_MIB` (the file's pages are allocated only as
/// they are used, but one connection should not claim more).
pub const MAX_STAGING_MIB: u64 = 4096;

/// Where launchers put a process's rank, in the order they are looked at:
/// Open MPI (mpirun), MPICH/Intel MPI (PMI), Slurm (srun), then torchrun's
/// `RANK`, which counts only beside its `WORLD_SIZE` (a lone `RANK` in a
/// shell says nothing of a launcher).
pub const RANK_VARIABLES: [&str; 4] = ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"];
/// The variable without which `RANK` is not a launcher's rank.
const TORCHRUN_WORLD_SIZE: &str = "WORLD_SIZE";

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// `DITTO_KERNEL`: the target kernel query; `None` keeps the tool passive.
    pub kernel: Option<String>,
    /// `DITTO_SOCKET`: the collector's Unix socket.
    pub socket: Option<PathBuf>,
    /// `DITTO_ARG_TYPES`, parsed; an unparsable list is an error in `problems`.
    pub arg_types: Option<Vec<ParamType>>,
    /// `DITTO_DISPATCH`: which matched dispatches are held and captured
    /// (default all); the others pass untouched but keep their indices.
    pub dispatch: DispatchSelection,
    /// `DITTO_CAPTURE`: which pointer arguments, before and/or after the
    /// kernel (default: non-const pointers, after).
    pub capture: CaptureSet,
    /// `DITTO_ARG_SIZES`: extents of pointer arguments in elements, from
    /// the dispatch's integer arguments; the others reach the end of
    /// their allocation.
    pub arg_sizes: ArgSizes,
    /// Outputs that are interior pointers of a larger allocation are taken
    /// before the kernel too, to be compared by what the kernels wrote;
    /// `DITTO_SUBALLOCATION_WRITES=0` turns it off.
    pub interior_outputs_before: bool,
    /// `DITTO_RUN_NAME`, default the process id.
    pub run_name: String,
    /// The target dispatch's release is raised to SYSTEM scope, so its
    /// outputs are visible to copy engines and the host when `done` fires.
    /// For ditto's own tests only, `DITTO_TEST_KEEP_AGENT_RELEASE=1` keeps
    /// the application's scope (to show the hazard the raise prevents).
    pub raise_release_scope: bool,
    /// `DITTO_TIMEOUT_MS`: how long to wait for the collector's answer.
    pub timeout: Duration,
    /// The uid a collector must run as to be sent anything: this
    /// process's (real) uid, or `DITTO_COLLECTOR_UID`.
    pub collector_uid: u32,
    /// `DITTO_LOG`.
    pub log: LogLevel,
    /// `DITTO_STAGING_MIB`: size of the staging file that small buffers are
    /// copied into so their dispatch is released at once (default 64 MiB);
    /// 0: none, every buffer travels by IPC.
    pub staging_bytes: u64,
    /// The launcher's rank of this process: the first of [`RANK_VARIABLES`]
    /// that is set to a number.
    pub rank: Option<u32>,
    /// `DITTO_CUDA_DRIVER`: the CUDA driver library the CUDA backend opens
    /// (default `libcuda.so.1`, already loaded by the application).
    pub cuda_driver: String,
    /// `DITTO_CUPTI_LIBRARY`: libcupti to load first, if set.
    pub cupti_library: Option<String>,
    /// `CUDA_HOME`: where else libcupti is looked for.
    pub cuda_home: Option<String>,
    /// Triton's cache (`TRITON_CACHE_DIR`, else `$HOME/.triton/cache`):
    /// where a Triton kernel's parameter types are read from.
    pub triton_cache: Option<std::path::PathBuf>,
    /// Variables that were set but could not be used, as messages for the log.
    pub problems: Vec<String>,
    /// Errors that forbid capturing (a wrong argument-type list would read garbage).
    pub fatal: Option<String>,
}

/// Where a Triton kernel's types are looked for, read when a kernel is
/// first seen (a Python program may set `TRITON_CACHE_DIR` after the tool
/// started): `base` ([`Options::triton_cache`]), then the caches the
/// process's environment names now (`TRITON_CACHE_DIR`, else
/// `~/.triton/cache`, and torch.compile's per-device caches).
pub fn triton_caches(base: Option<&std::path::Path>) -> Vec<std::path::PathBuf> {
    let mut caches: Vec<std::path::PathBuf> = base.into_iter().map(|b| b.to_path_buf()).collect();
    for dir in ditto_kernels::triton::caches_from_env() {
        if !caches.contains(&dir) {
            caches.push(dir);
        }
    }
    caches
}

impl Options {
    pub fn from_env() -> Options {
        Options::from_lookup(|name| std::env::var(name).ok())
    }

    /// Where a Triton kernel's types are looked for: [`triton_caches`].
    pub fn triton_caches(&self) -> Vec<std::path::PathBuf> {
        triton_caches(self.triton_cache.as_deref())
    }

    /// Options from any variable source (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Options {
        let non_empty = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let mut problems = Vec::new();
        let mut fatal = None;
        let log = match non_empty("DITTO_LOG") {
            None => LogLevel::Warn,
            Some(v) => LogLevel::parse(&v).unwrap_or_else(|| {
                problems.push(format!(
                    "DITTO_LOG=`{v}` is not one of off|error|warn|info|debug; using warn"
                ));
                LogLevel::Warn
            }),
        };
        let timeout = match non_empty("DITTO_TIMEOUT_MS") {
            None => DEFAULT_TIMEOUT,
            Some(v) => match v.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    problems.push(format!(
                        "DITTO_TIMEOUT_MS=`{v}` is not a positive number of milliseconds; using {}",
                        DEFAULT_TIMEOUT.as_millis()
                    ));
                    DEFAULT_TIMEOUT
                }
            },
        };
        let staging_bytes = match non_empty("DITTO_STAGING_MIB") {
            None => DEFAULT_STAGING_BYTES,
            Some(v) => match v.trim().parse::<u64>() {
                Ok(mib) if mib <= MAX_STAGING_MIB => mib << 20,
                _ => {
                    problems.push(format!(
                        "DITTO_STAGING_MIB=`{v}` is not a number of MiB from 0 to {MAX_STAGING_MIB}; using {}",
                        DEFAULT_STAGING_BYTES >> 20
                    ));
                    DEFAULT_STAGING_BYTES
                }
            },
        };
        let arg_types = match non_empty("DITTO_ARG_TYPES") {
            None => None,
            Some(v) => match parse_arg_types(&v) {
                Ok(types) => Some(types),
                Err(e) => {
                    fatal = Some(format!("DITTO_ARG_TYPES=`{v}`: {e}"));
                    None
                }
            },
        };
        let dispatch = match non_empty("DITTO_DISPATCH") {
            None => DispatchSelection::All,
            Some(v) => DispatchSelection::parse(&v).unwrap_or_else(|e| {
                // Capturing other dispatches than asked would mislead.
                fatal = Some(format!("DITTO_DISPATCH: {e}"));
                DispatchSelection::All
            }),
        };
        let capture = match non_empty("DITTO_CAPTURE") {
            None => CaptureSet::default(),
            Some(v) => CaptureSet::parse(&v).unwrap_or_else(|e| {
                fatal = Some(format!("DITTO_CAPTURE: {e}"));
                CaptureSet::default()
            }),
        };
        let arg_sizes = match non_empty("DITTO_ARG_SIZES") {
            None => ArgSizes::default(),
            Some(v) => ArgSizes::parse(&v).unwrap_or_else(|e| {
                fatal = Some(format!("DITTO_ARG_SIZES: {e}"));
                ArgSizes::default()
            }),
        };
        // SAFETY: getuid cannot fail.
        let own_uid = unsafe { libc::getuid() };
        let collector_uid = match non_empty("DITTO_COLLECTOR_UID") {
            None => own_uid,
            Some(v) => v.trim().parse::<u32>().unwrap_or_else(|_| {
                problems.push(format!(
                    "DITTO_COLLECTOR_UID=`{v}` is not a uid; only a collector of uid {own_uid} is trusted"
                ));
                own_uid
            }),
        };
        let mut rank = None;
        for name in RANK_VARIABLES {
            if name == "RANK" && non_empty(TORCHRUN_WORLD_SIZE).is_none() {
                continue;
            }
            if let Some(v) = non_empty(name) {
                match v.trim().parse::<u32>() {
                    Ok(r) => {
                        rank = Some(r);
                        break;
                    }
                    Err(_) => problems.push(format!("{name}=`{v}` is not a rank number; ignored")),
                }
            }
        }
        Options {
            rank,
            kernel: non_empty("DITTO_KERNEL").map(|k| k.trim().to_string()),
            socket: non_empty("DITTO_SOCKET").map(PathBuf::from),
            arg_types,
            dispatch,
            capture,
            arg_sizes,
            interior_outputs_before: non_empty("DITTO_SUBALLOCATION_WRITES").as_deref()
                != Some("0"),
            raise_release_scope: non_empty("DITTO_TEST_KEEP_AGENT_RELEASE").as_deref() != Some("1"),
            run_name: non_empty("DITTO_RUN_NAME").unwrap_or_else(|| std::process::id().to_string()),
            timeout,
            collector_uid,
            log,
            staging_bytes,
            cuda_driver: non_empty("DITTO_CUDA_DRIVER").unwrap_or_else(|| "libcuda.so.1".into()),
            cupti_library: non_empty("DITTO_CUPTI_LIBRARY"),
            cuda_home: non_empty("CUDA_HOME"),
            triton_cache: ditto_kernels::triton::cache_dir(
                non_empty("TRITON_CACHE_DIR").as_deref(),
                non_empty("HOME").as_deref(),
            ),
            problems,
            fatal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn opts(vars: &[(&str, &str)]) -> Options {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Options::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_are_passive_with_pid_run_name_and_thirty_second_timeout() {
        let o = opts(&[]);
        assert_eq!(o.kernel, None);
        assert_eq!(o.socket, None);
        assert_eq!(o.run_name, std::process::id().to_string());
        assert_eq!(o.timeout, Duration::from_secs(30));
        assert_eq!(o.log, LogLevel::Warn);
        assert_eq!(o.staging_bytes, 64 << 20);
        assert_eq!(o.cuda_driver, "libcuda.so.1");
        assert_eq!((o.cupti_library, o.cuda_home), (None, None));
        assert!(o.problems.is_empty() && o.fatal.is_none());
    }

    #[test]
    fn the_cuda_libraries_are_read() {
        let o = opts(&[
            ("DITTO_CUDA_DRIVER", "/opt/fake/libcuda.so.1"),
            ("DITTO_CUPTI_LIBRARY", "/opt/fake/libcupti.so"),
            ("CUDA_HOME", "/usr/local/cuda"),
        ]);
        assert_eq!(o.cuda_driver, "/opt/fake/libcuda.so.1");
        assert_eq!(o.cupti_library.as_deref(), Some("/opt/fake/libcupti.so"));
        assert_eq!(o.cuda_home.as_deref(), Some("/usr/local/cuda"));
    }

    #[test]
    fn staging_size_is_read_zero_turns_it_off_and_a_bad_one_keeps_the_default() {
        assert_eq!(opts(&[("DITTO_STAGING_MIB", "8")]).staging_bytes, 8 << 20);
        assert_eq!(opts(&[("DITTO_STAGING_MIB", "0")]).staging_bytes, 0);
        for bad in ["lots", "-1", "1000000"] {
            let o = opts(&[("DITTO_STAGING_MIB", bad)]);
            assert_eq!(o.staging_bytes, 64 << 20, "{bad}");
            assert!(
                o.problems[0].starts_with("DITTO_STAGING_MIB="),
                "{:?}",
                o.problems
            );
        }
    }

    #[test]
    fn every_variable_is_read() {
        let o = opts(&[
            ("DITTO_KERNEL", "scale_values"),
            ("DITTO_SOCKET", "/tmp/x/s.sock"),
            ("DITTO_ARG_TYPES", "const f32*,f32*,i32"),
            ("DITTO_RUN_NAME", "ref"),
            ("DITTO_TIMEOUT_MS", "250"),
            ("DITTO_LOG", "debug"),
        ]);
        assert_eq!(o.kernel.as_deref(), Some("scale_values"));
        assert_eq!(o.socket, Some(PathBuf::from("/tmp/x/s.sock")));
        assert_eq!(o.arg_types.as_ref().map(|t| t.len()), Some(3));
        assert_eq!(o.run_name, "ref");
        assert_eq!(o.timeout, Duration::from_millis(250));
        assert_eq!(o.log, LogLevel::Debug);
        assert_eq!(o.rank, None);
        assert_eq!(o.dispatch, DispatchSelection::All);
        assert_eq!(o.capture, CaptureSet::default());
    }

    #[test]
    fn dispatch_selection_is_read_and_a_bad_one_is_fatal() {
        let o = opts(&[("DITTO_DISPATCH", "1,4..5")]);
        assert!(o.fatal.is_none());
        let picked: Vec<u64> = (0..8).filter(|&i| o.dispatch.selects(i)).collect();
        assert_eq!(picked, vec![1, 4, 5]);
        let bad = opts(&[("DITTO_DISPATCH", "5..2")]);
        assert!(bad.fatal.as_deref().unwrap().starts_with("DITTO_DISPATCH"));
    }

    #[test]
    fn capture_set_is_read_and_a_bad_one_is_fatal() {
        let o = opts(&[("DITTO_CAPTURE", "inputs,outputs")]);
        assert!(o.fatal.is_none());
        assert!(o.capture.inputs && o.capture.outputs && !o.capture.all);
        let sized = opts(&[("DITTO_ARG_SIZES", "arg2=arg3")]);
        assert_eq!(sized.arg_sizes.sizes.len(), 1);
        assert!(opts(&[("DITTO_ARG_SIZES", "c=n")]).fatal.is_some());
        let bad = opts(&[("DITTO_CAPTURE", "outputz")]);
        assert!(bad.fatal.as_deref().unwrap().contains("`outputz`"));
    }

    #[test]
    fn rank_comes_from_the_first_launcher_variable_set() {
        assert_eq!(
            opts(&[("OMPI_COMM_WORLD_RANK", "3"), ("PMI_RANK", "1")]).rank,
            Some(3)
        );
        assert_eq!(
            opts(&[("PMI_RANK", "1"), ("SLURM_PROCID", "2")]).rank,
            Some(1)
        );
        assert_eq!(opts(&[("SLURM_PROCID", "2")]).rank, Some(2));
        let bad = opts(&[("OMPI_COMM_WORLD_RANK", "x"), ("SLURM_PROCID", "5")]);
        assert_eq!(bad.rank, Some(5));
        assert_eq!(bad.problems.len(), 1);
    }

    #[test]
    fn torchrun_s_rank_counts_beside_its_world_size_and_after_the_mpi_variables() {
        assert_eq!(opts(&[("RANK", "3"), ("WORLD_SIZE", "8")]).rank, Some(3));
        let lone = opts(&[("RANK", "3")]);
        assert_eq!(lone.rank, None);
        assert!(lone.problems.is_empty(), "{:?}", lone.problems);
        assert_eq!(
            opts(&[("RANK", "3"), ("WORLD_SIZE", "8"), ("SLURM_PROCID", "1")]).rank,
            Some(1)
        );
    }

    #[test]
    fn bad_values_fall_back_with_a_problem_and_bad_arg_types_are_fatal() {
        let o = opts(&[
            ("DITTO_TIMEOUT_MS", "soon"),
            ("DITTO_LOG", "loud"),
            ("DITTO_ARG_TYPES", "float*"),
        ]);
        assert_eq!(o.timeout, DEFAULT_TIMEOUT);
        assert_eq!(o.log, LogLevel::Warn);
        assert_eq!(o.problems.len(), 2);
        assert!(o.fatal.as_deref().unwrap().contains("float*"));
    }
}

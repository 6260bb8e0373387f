//! Host builds of HIP applications: where the CPU runtime finds the host
//! implementation of a kernel that arrived as a real AMDGPU code object.
//! Owns the search path, the loaded host libraries (dlopen'ed once, kept
//! for the life of the process) and the lookup by mangled kernel name.
//!
//! A host build is a CPU code object (include/ditto_hsa_cpu.h, ABI 2) made
//! by g++ from the same HIP source with include/ditto_hip_host/ (see the
//! header there): it exports `ditto_cpu_code_object_kernels`, whose
//! entries are named by the same mangled names hipcc gives the kernels.
//!
//! Search order, first match wins:
//! 1. each path of `DITTO_HIP_HOST_KERNELS` (colon-separated);
//! 2. `<executable>.host.so` beside the running executable
//!    (`/proc/self/exe` resolved, with `.host.so` appended);
//! 3. every other `*.host.so` in the executable's directory, in name order:
//!    the host builds of code objects the program loads itself
//!    (`hipModuleLoad` of a `ditto hipcc --genco` output, which writes
//!    `<module>.host.so`).
//!
//! A kernel found nowhere is not an error at load (a code object may hold
//! kernels that are never dispatched); `find` says where it looked, and
//! the dispatch fails with that message.

use crate::cpu::{KernelEntry, KernelListError, Library};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

/// The variable naming host builds to search before the executable's own.
pub const HOST_KERNELS_VAR: &str = "DITTO_HIP_HOST_KERNELS";

/// A kernel's host implementation.
#[derive(Clone)]
pub struct HostKernel {
    pub entry: KernelEntry,
    /// Bytes of the explicit arguments as the host build lays them out.
    pub kernarg_size: u32,
    pub library: Arc<Library>,
    pub path: PathBuf,
}

struct HostLibrary {
    library: Arc<Library>,
    kernels: HashMap<String, (KernelEntry, u32)>,
    /// Device variables: symbol name → (address, size).
    variables: HashMap<String, (u64, u64)>,
}

/// A device variable's storage in a host build.
#[derive(Clone)]
pub struct HostVariable {
    pub address: u64,
    pub size: u64,
    pub library: Arc<Library>,
}

/// A host build as loaded, or why it could not be used.
type Loaded = Result<Arc<HostLibrary>, String>;

/// Path → the library, or why it could not be used.
static LOADED: LazyLock<Mutex<HashMap<PathBuf, Loaded>>> = LazyLock::new(Default::default);

/// Where host builds are looked for, in order.
fn search_path() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::env::var_os(HOST_KERNELS_VAR)
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    if let Ok(exe) = std::fs::read_link("/proc/self/exe") {
        let mut beside = exe.clone().into_os_string();
        beside.push(".host.so");
        let own = PathBuf::from(beside);
        let mut others: Vec<PathBuf> = exe
            .parent()
            .and_then(|dir| std::fs::read_dir(dir).ok())
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p != &own
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().ends_with(".host.so"))
            })
            .collect();
        others.sort();
        paths.push(own);
        paths.extend(others);
    }
    paths
}

fn open(path: &Path) -> Loaded {
    if !path.exists() {
        return Err("no such file".into());
    }
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| "the path holds a NUL byte".to_string())?;
    // SAFETY: dlopen of a file the user named as a host build.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local string or null.
        let why = unsafe { libc::dlerror() };
        let why = if why.is_null() {
            "dlopen failed".to_string()
        } else {
            // SAFETY: a NUL-terminated string from dlerror.
            unsafe { CStr::from_ptr(why) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(why);
    }
    // SAFETY: a live handle dlopen'ed above, given to the library.
    let library = Arc::new(unsafe { Library::from_handle(handle) });
    let list = library.kernels().map_err(|e| match e {
        KernelListError::NoKernelList => {
            "it exports no ditto_cpu_code_object_kernels (not a host build)".to_string()
        }
        KernelListError::Abi(refused) => refused.to_string(),
    })?;
    let mut kernels = HashMap::new();
    for k in list {
        let Some(entry) = k.entry else { continue };
        if k.name.is_null() {
            continue;
        }
        // SAFETY: a NUL-terminated name in the library.
        let name = unsafe { CStr::from_ptr(k.name) }
            .to_string_lossy()
            .into_owned();
        kernels.insert(name, (entry, k.kernarg_segment_size));
    }
    let variables = library
        .variables()
        .into_iter()
        .map(|(name, address, size)| (name, (address, size)))
        .collect();
    Ok(Arc::new(HostLibrary {
        library,
        kernels,
        variables,
    }))
}

/// The host build at `path`, opened once per process.
fn loaded(path: &Path) -> Loaded {
    let mut cache = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    cache
        .entry(path.to_path_buf())
        .or_insert_with(|| open(path))
        .clone()
}

/// The host build's storage of the device variable `symbol`, when a host
/// build on the search path has it.
pub fn find_variable(symbol: &str) -> Option<HostVariable> {
    for path in search_path() {
        if let Ok(lib) = loaded(&path)
            && let Some(&(address, size)) = lib.variables.get(symbol)
        {
            return Some(HostVariable {
                address,
                size,
                library: lib.library.clone(),
            });
        }
    }
    None
}

/// No host build holds a kernel: where the runtime looked and what it
/// found there (each place with why it did not serve).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "looked in {}{}; build the program with `ditto hipcc` in place of hipcc (it writes the \
     host build beside the program as <executable>.host.so), or name a host build in \
     {var}",
    places(looked),
    if *variable_set { String::new() } else { format!(" ({HOST_KERNELS_VAR} is unset)") },
    var = HOST_KERNELS_VAR
)]
pub struct NoHostKernel {
    /// Each place looked in: `"<path> (<why not>)"`.
    pub looked: Vec<String>,
    /// Whether DITTO_HIP_HOST_KERNELS is set.
    pub variable_set: bool,
}

fn places(looked: &[String]) -> String {
    if looked.is_empty() {
        "nothing".to_string()
    } else {
        looked.join(", ")
    }
}

/// The host implementation of kernel `mangled`, or where the runtime looked
/// and what it found there.
pub fn find(mangled: &str) -> Result<HostKernel, NoHostKernel> {
    let mut looked = Vec::new();
    for path in search_path() {
        match loaded(&path) {
            Ok(lib) => match lib.kernels.get(mangled) {
                Some(&(entry, kernarg_size)) => {
                    return Ok(HostKernel {
                        entry,
                        kernarg_size,
                        library: lib.library.clone(),
                        path,
                    });
                }
                None => looked.push(format!("{} (no such kernel)", path.display())),
            },
            Err(why) => looked.push(format!("{} ({why})", path.display())),
        }
    }
    Err(NoHostKernel {
        looked,
        variable_set: std::env::var_os(HOST_KERNELS_VAR).is_some(),
    })
}

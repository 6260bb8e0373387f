//! The ditto CPU code object (include/ditto_hsa_cpu.h): a host shared
//! object that exports its kernel list. Owns that C ABI (the kernel list's
//! entries, the argument of an entry call), the check of the code object's
//! ABI word, and `Library`, a dlopen'ed code object whose handle it closes.
//! Uses no other module of the crate: executables, host builds
//! (`host_kernels`) and kernel execution (`dispatch`) all build on it.
//! Never dlopens anything itself (callers decide what may be opened).

use std::ffi::c_void;

/// `DITTO_CPU_CODE_OBJECT_ABI`: the only code-object ABI this runtime runs.
pub const CODE_OBJECT_ABI: u32 = 2;

/// `ditto_cpu_dispatch_t`.
#[repr(C)]
#[derive(Debug)]
pub struct CpuDispatch {
    pub grid_size: [u32; 3],
    pub workgroup_size: [u16; 3],
    pub dimensions: u16,
    pub group_segment_size: u32,
    pub private_segment_size: u32,
    pub kernarg: *const c_void,
    /// Linear id (x fastest) of the first group this call runs.
    pub first_group: u64,
    /// Groups this call runs from `first_group`.
    pub group_count: u64,
    /// A cooperative launch's grid barrier (`dispatch`), else None.
    pub grid_barrier: Option<unsafe extern "C" fn(*mut c_void)>,
    pub grid_barrier_context: *mut c_void,
}

/// `ditto_cpu_kernel_entry_t`.
pub type KernelEntry = unsafe extern "C" fn(*const CpuDispatch) -> i32;

/// `ditto_cpu_kernel_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CpuKernel {
    pub name: *const std::ffi::c_char,
    pub kernarg_segment_size: u32,
    pub kernarg_segment_alignment: u32,
    pub group_segment_size: u32,
    pub reserved: u32,
    pub entry: Option<KernelEntry>,
}

const _: () = {
    assert!(std::mem::size_of::<CpuDispatch>() == 72);
    assert!(std::mem::offset_of!(CpuDispatch, grid_barrier) == 56);
    assert!(std::mem::offset_of!(CpuDispatch, kernarg) == 32);
    assert!(std::mem::offset_of!(CpuDispatch, first_group) == 40);
    assert!(std::mem::offset_of!(CpuDispatch, group_count) == 48);
    assert!(std::mem::size_of::<CpuKernel>() == 32);
};

/// Why a code object's `ditto_cpu_code_object_abi` word refuses it; the
/// message to print names both ABIs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeObjectAbiError {
    /// It names another ABI.
    #[error(
        "ditto GPU engine: refusing a code object of ditto CPU code-object ABI {0}: this runtime runs \
         ABI {ours} (DITTO_CPU_CODE_OBJECT_ABI in include/ditto_hsa_cpu.h); rebuild the \
         code object with the current include/ditto_hip_cpu.hpp",
        ours = CODE_OBJECT_ABI
    )]
    Other(u32),
    /// It exports the kernel list but no ABI word.
    #[error(
        "ditto GPU engine: refusing a code object that exports ditto_cpu_code_object_kernels but no \
         ditto_cpu_code_object_abi: this runtime runs ABI {ours} \
         (include/ditto_hsa_cpu.h); rebuild the code object with the current headers",
        ours = CODE_OBJECT_ABI
    )]
    Missing,
}

/// Checks a code object's `ditto_cpu_code_object_abi` word (None: the code
/// object does not export it).
pub fn check_code_object_abi(abi: Option<u32>) -> Result<(), CodeObjectAbiError> {
    match abi {
        Some(CODE_OBJECT_ABI) => Ok(()),
        Some(other) => Err(CodeObjectAbiError::Other(other)),
        None => Err(CodeObjectAbiError::Missing),
    }
}

/// A dlopen'ed CPU code object; dlclosed when the last kernel using it goes.
///
/// glibc recognises an already-loaded object by its path string before it
/// compares inodes, so "/proc/self/fd/N" must never name two code objects:
/// the library keeps its own descriptor N open until after dlclose, so N
/// cannot be reused for another code object while this one is loaded.
pub struct Library {
    handle: usize,
    /// -1 for a library opened by path (a host build).
    fd: i32,
}

/// Why a library's kernel list cannot be used.
#[derive(Debug)]
pub enum KernelListError {
    /// It exports no `ditto_cpu_code_object_kernels`: not a CPU code object.
    NoKernelList,
    /// Its ABI word is missing or names another ABI.
    Abi(CodeObjectAbiError),
}

impl Library {
    /// A library dlopen'ed by path.
    ///
    /// # Safety
    /// `handle` is a live dlopen handle, given to the library (dlclosed
    /// when it drops).
    pub unsafe fn from_handle(handle: *mut c_void) -> Library {
        Library {
            handle: handle as usize,
            fd: -1,
        }
    }

    /// A library dlopen'ed as "/proc/self/fd/`fd`"; it owns `fd` and closes
    /// it after dlclose.
    ///
    /// # Safety
    /// `handle` is a live dlopen handle and `fd` an open descriptor, both
    /// given to the library (closed when it drops).
    pub unsafe fn from_handle_and_fd(handle: *mut c_void, fd: i32) -> Library {
        Library {
            handle: handle as usize,
            fd,
        }
    }

    /// The dlopen handle.
    pub fn handle(&self) -> *mut c_void {
        self.handle as *mut c_void
    }

    /// The kernels the code object exports, once its ABI word is checked;
    /// valid while the library is loaded.
    pub fn kernels(&self) -> Result<&[CpuKernel], KernelListError> {
        // SAFETY: looking up symbols in a live handle.
        let (kernels_fn, abi) = unsafe {
            (
                libc::dlsym(self.handle(), c"ditto_cpu_code_object_kernels".as_ptr()),
                libc::dlsym(self.handle(), c"ditto_cpu_code_object_abi".as_ptr()) as *const u32,
            )
        };
        if kernels_fn.is_null() {
            return Err(KernelListError::NoKernelList);
        }
        // SAFETY: if present, the ABI word is a uint32_t exported by the code object.
        let abi = (!abi.is_null()).then(|| unsafe { *abi });
        check_code_object_abi(abi).map_err(KernelListError::Abi)?;
        // SAFETY: the symbol has the documented signature.
        let kernels_fn: unsafe extern "C" fn(*mut u32) -> *const CpuKernel =
            unsafe { std::mem::transmute::<*mut c_void, _>(kernels_fn) };
        let mut count = 0u32;
        // SAFETY: calling the code object's exported function as documented.
        let list = unsafe { kernels_fn(&mut count) };
        if list.is_null() || count == 0 {
            return Ok(&[]);
        }
        // SAFETY: the code object returns `count` kernels valid while loaded
        // (as long as `self`).
        Ok(unsafe { std::slice::from_raw_parts(list, count as usize) })
    }
}

/// One device variable of a host build (`ditto_cpu_variable_t`).
#[repr(C)]
struct CpuVariable {
    name: *const std::ffi::c_char,
    address: *mut c_void,
    size: u64,
}

impl Library {
    /// The device variables the code object exports (name, address, size);
    /// none when it exports no `ditto_cpu_code_object_variables`.
    pub fn variables(&self) -> Vec<(String, u64, u64)> {
        // SAFETY: looking up a symbol in a live handle.
        let f = unsafe { libc::dlsym(self.handle(), c"ditto_cpu_code_object_variables".as_ptr()) };
        if f.is_null() {
            return Vec::new();
        }
        // SAFETY: the symbol has the documented signature.
        let f: unsafe extern "C" fn(*mut u32) -> *const CpuVariable =
            unsafe { std::mem::transmute::<*mut c_void, _>(f) };
        let mut count = 0u32;
        // SAFETY: calling the code object's exported function as documented.
        let list = unsafe { f(&mut count) };
        if list.is_null() {
            return Vec::new();
        }
        // SAFETY: `count` records valid while the library is loaded.
        let records = unsafe { std::slice::from_raw_parts(list, count as usize) };
        records
            .iter()
            .filter(|v| !v.name.is_null())
            .map(|v| {
                // SAFETY: a NUL-terminated name in the library.
                let name = unsafe { std::ffi::CStr::from_ptr(v.name) };
                (
                    name.to_string_lossy().into_owned(),
                    v.address as u64,
                    v.size,
                )
            })
            .collect()
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen and fd from dup; each closed once.
        unsafe {
            libc::dlclose(self.handle as *mut c_void);
            if self.fd >= 0 {
                libc::close(self.fd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_current_code_object_abi_is_accepted_and_refusals_name_both() {
        assert_eq!(check_code_object_abi(Some(CODE_OBJECT_ABI)), Ok(()));
        let old = check_code_object_abi(Some(1)).unwrap_err().to_string();
        assert!(old.contains("ABI 1") && old.contains("ABI 2"), "{old}");
        let missing = check_code_object_abi(None).unwrap_err().to_string();
        assert!(
            missing.contains("no ditto_cpu_code_object_abi"),
            "{missing}"
        );
    }
}

//! The modules a CUDA application loads, as CUPTI's resource callback
//! reports them (`CUPTI_CBID_RESOURCE_MODULE_LOADED`, subscribed only for a
//! replay capture): the callback's layouts, and a copy of each cubin that
//! defines a kernel the query names, kept by kernel name for the replay
//! capture ([`CodeObjectCopy`]). With CUDA's lazy module loading (the
//! default since CUDA 12.2) a kernel's module is reported inside its first
//! launch, after the launch's entry callback: the copy may only exist by
//! the launch's exit.

use crate::capture::kernel_code::CodeObjectCopy;
use crate::log::log_info;
use ditto_kernels::{KernelNames, elf_function_names, matches};
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex};

/// `CUPTI_CB_DOMAIN_RESOURCE` and `CUPTI_CBID_RESOURCE_MODULE_LOADED`
/// (cupti_callbacks.h).
pub const DOMAIN_RESOURCE: u32 = 3;
pub const CBID_MODULE_LOADED: u32 = 6;

/// `CUpti_ResourceData`.
#[repr(C)]
pub struct ResourceData {
    pub context: *mut c_void,
    /// A union holding the stream for stream events.
    pub resource_handle: *mut c_void,
    pub resource_descriptor: *mut c_void,
}

/// `CUpti_ModuleResourceData`.
#[repr(C)]
pub struct ModuleResourceData {
    pub module_id: u32,
    pub cubin_size: usize,
    pub cubin: *const c_char,
}

/// The cubins of target kernels, by mangled kernel name.
#[derive(Default)]
pub struct CudaModules {
    by_kernel: Mutex<HashMap<String, Arc<CodeObjectCopy>>>,
}

impl CudaModules {
    /// A module was loaded: when its cubin defines a kernel `query`
    /// names, a copy is kept under each such name.
    pub fn loaded(&self, cubin: &[u8], query: &str) {
        let Ok(functions) = elf_function_names(cubin) else {
            return;
        };
        let targets: Vec<String> = functions
            .into_iter()
            .filter(|name| matches(query, &KernelNames::new(name)))
            .collect();
        if targets.is_empty() {
            return;
        }
        let copy = Arc::new(CodeObjectCopy::new(Arc::from(cubin)));
        log_info!(
            "kept the module of {} ({} bytes) for replay",
            targets.join(", "),
            cubin.len()
        );
        let mut map = self.by_kernel.lock().unwrap_or_else(|e| e.into_inner());
        for name in targets {
            map.insert(name, copy.clone());
        }
    }

    /// The cubin that defines kernel `name`, when its load was seen.
    pub fn of(&self, name: &str) -> Option<Arc<CodeObjectCopy>> {
        self.by_kernel
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }
}

/// The cubin a module-loaded callback describes.
///
/// # Safety
/// `data` is the `CUpti_ResourceData` of a `CUPTI_CBID_RESOURCE_MODULE_LOADED`
/// callback, live during the callback.
pub unsafe fn cubin_of(data: &ResourceData) -> Option<&[u8]> {
    let module = data.resource_descriptor as *const ModuleResourceData;
    if module.is_null() {
        return None;
    }
    // SAFETY: the callback's descriptor is a CUpti_ModuleResourceData.
    let module = unsafe { &*module };
    if module.cubin.is_null() || module.cubin_size == 0 {
        return None;
    }
    // SAFETY: CUPTI gives `cubin_size` readable bytes at `cubin` during the callback.
    Some(unsafe { std::slice::from_raw_parts(module.cubin as *const u8, module.cubin_size) })
}

//! The model interface ROCr 7.2.4's thunk calls (libhsakmt
//! `hsakmtmodeliface.h`, version 0.4): the table returned by the one
//! export, `get_hsakmt_model_functions`, and its entry points.
//!
//! The thunk calls `create` and `set_global_aperture` once per GPU node of
//! the topology, `set_set_event` with the function that sets one of its
//! events, `alloced_memory` / `freed_memory` for every GPU allocation, and
//! `register_queue` / `destroy_queue` for each AQL or SDMA queue (queue
//! addresses are relative to the aperture). `set_notify_event` and
//! `set_wait_event` are accepted and unused (the thunk of 7.2.4 never
//! calls them). Every entry point catches panics: none crosses into ROCr.

use crate::device::ModelGpu;
use crate::packet_processor::QueueProcessor;
use crate::topology;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The interface version this model implements: the thunk accepts a model
/// of the same major version and a minor version at least its own.
pub const VERSION_MAJOR: u32 = 0;
pub const VERSION_MINOR: u32 = 4;

/// `KFD_IOC_QUEUE_TYPE_COMPUTE_AQL` (kfd_ioctl.h).
pub const QUEUE_TYPE_COMPUTE_AQL: u32 = 2;
/// `KFD_IOC_QUEUE_TYPE_SDMA`, `_SDMA_XGMI`, `_SDMA_BY_ENG_ID`.
pub const QUEUE_TYPES_SDMA: [u32; 3] = [1, 3, 4];

/// `struct hsakmt_model_queue_info`: addresses relative to the aperture.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct QueueInfo {
    pub ring_base_address: u64,
    pub write_pointer_address: u64,
    pub read_pointer_address: u64,
    pub doorbell: *mut u64,
    /// In bytes.
    pub ring_size: u32,
    pub queue_type: u32,
}

/// `hsakmt_model_set_event_fn`.
pub type SetEventFn = unsafe extern "C" fn(data: *mut c_void, event_id: u32);

/// `struct hsakmt_model_functions`, version 0.4.
#[repr(C)]
pub struct ModelFunctions {
    pub version_major: u32,
    pub version_minor: u32,
    pub create: unsafe extern "C" fn() -> *mut ModelGpu,
    pub destroy: unsafe extern "C" fn(*mut ModelGpu),
    pub set_global_aperture: unsafe extern "C" fn(*mut ModelGpu, *mut c_void, u64),
    pub alloced_memory: unsafe extern "C" fn(*mut ModelGpu, *mut c_void, u64, u32),
    pub freed_memory: unsafe extern "C" fn(*mut ModelGpu, *mut c_void, u64),
    pub set_notify_event:
        unsafe extern "C" fn(*mut ModelGpu, Option<unsafe extern "C" fn(*mut c_void)>, *mut c_void),
    pub set_wait_event: unsafe extern "C" fn(
        *mut ModelGpu,
        Option<unsafe extern "C" fn(*mut c_void, u64, u64)>,
        *mut c_void,
    ),
    pub register_queue: unsafe extern "C" fn(*mut ModelGpu, *mut QueueInfo) -> *mut QueueProcessor,
    pub set_set_event: unsafe extern "C" fn(*mut ModelGpu, Option<SetEventFn>, *mut c_void),
    pub destroy_queue: unsafe extern "C" fn(*mut ModelGpu, *mut QueueProcessor),
}

static FUNCTIONS: ModelFunctions = ModelFunctions {
    version_major: VERSION_MAJOR,
    version_minor: VERSION_MINOR,
    create,
    destroy,
    set_global_aperture,
    alloced_memory,
    freed_memory,
    set_notify_event,
    set_wait_event,
    register_queue,
    set_set_event,
    destroy_queue,
};

/// The one export the thunk looks up (`dlsym`) in `HSA_MODEL_LIB`.
#[unsafe(no_mangle)]
pub extern "C" fn get_hsakmt_model_functions() -> *const ModelFunctions {
    &FUNCTIONS
}

/// Runs `f`, turning a panic into `fallback` and a message: the thunk is C
/// and aborts on nothing we return, so a panic must stop here.
fn guarded<T>(what: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => value,
        Err(_) => {
            eprintln!("ditto model GPU: internal error in {what}; the call did nothing");
            fallback
        }
    }
}

unsafe extern "C" fn create() -> *mut ModelGpu {
    guarded("create", std::ptr::null_mut(), || {
        // The thunk creates one model per GPU node, in node order.
        static CREATED: AtomicUsize = AtomicUsize::new(0);
        let nth = CREATED.fetch_add(1, Ordering::Relaxed);
        Box::into_raw(Box::new(ModelGpu::new(topology::nth_gpu_node(nth))))
    })
}

unsafe extern "C" fn destroy(gpu: *mut ModelGpu) {
    guarded("destroy", (), || {
        if !gpu.is_null() {
            // SAFETY: `gpu` came from `create` and the thunk destroys it once.
            drop(unsafe { Box::from_raw(gpu) });
        }
    })
}

/// The thunk's pointer to a GPU it created, or None for null.
fn gpu_ref<'a>(gpu: *mut ModelGpu) -> Option<&'a ModelGpu> {
    // SAFETY: the thunk passes back what `create` returned, alive until
    // `destroy`; ModelGpu is shared between threads by design.
    unsafe { gpu.as_ref() }
}

unsafe extern "C" fn set_global_aperture(gpu: *mut ModelGpu, base: *mut c_void, size: u64) {
    guarded("set_global_aperture", (), || {
        if let Some(gpu) = gpu_ref(gpu) {
            gpu.set_aperture(base as usize, size);
        }
    })
}

unsafe extern "C" fn alloced_memory(gpu: *mut ModelGpu, va: *mut c_void, size: u64, flags: u32) {
    guarded("alloced_memory", (), || {
        if let Some(gpu) = gpu_ref(gpu) {
            gpu.allocated(va as u64, size, flags);
        }
    })
}

unsafe extern "C" fn freed_memory(gpu: *mut ModelGpu, va: *mut c_void, size: u64) {
    guarded("freed_memory", (), || {
        if let Some(gpu) = gpu_ref(gpu) {
            gpu.freed(va as u64, size);
        }
    })
}

unsafe extern "C" fn set_notify_event(
    _gpu: *mut ModelGpu,
    _callback: Option<unsafe extern "C" fn(*mut c_void)>,
    _data: *mut c_void,
) {
}

unsafe extern "C" fn set_wait_event(
    _gpu: *mut ModelGpu,
    _callback: Option<unsafe extern "C" fn(*mut c_void, u64, u64)>,
    _data: *mut c_void,
) {
}

unsafe extern "C" fn set_set_event(gpu: *mut ModelGpu, f: Option<SetEventFn>, data: *mut c_void) {
    guarded("set_set_event", (), || {
        if let Some(gpu) = gpu_ref(gpu) {
            gpu.set_event_callback(f, data);
        }
    })
}

unsafe extern "C" fn register_queue(
    gpu: *mut ModelGpu,
    info: *mut QueueInfo,
) -> *mut QueueProcessor {
    guarded("register_queue", std::ptr::null_mut(), || {
        let (Some(gpu), Some(info)) = (gpu_ref(gpu), unsafe { info.as_ref() }) else {
            return std::ptr::null_mut();
        };
        match gpu.register_queue(*info) {
            Ok(queue) => Box::into_raw(Box::new(queue)),
            Err(message) => {
                eprintln!("ditto model GPU: {message}");
                std::ptr::null_mut()
            }
        }
    })
}

unsafe extern "C" fn destroy_queue(_gpu: *mut ModelGpu, queue: *mut QueueProcessor) {
    guarded("destroy_queue", (), || {
        if !queue.is_null() {
            // SAFETY: `queue` came from `register_queue`; the thunk destroys
            // each queue once. Dropping stops and joins its thread.
            drop(unsafe { Box::from_raw(queue) });
        }
    })
}

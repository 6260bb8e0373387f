//! Queue lifecycle under the tool: every queue the application creates
//! becomes an intercept queue (created with the original amd_ext
//! `queue_intercept_create`) with ditto's packet callback registered on it
//! and profiling enabled (kernel durations); its [`QueueContext`], the
//! callback's data, is kept (process-wide, as the queues are) until the
//! application destroys the queue, then it is freed and the worker forgets
//! the queue.

use super::packet::{QueueContext, on_packets};
use super::tool::HsaTool;
use super::worker::WorkerMessage;
use crate::guard::ffi_guard;
use crate::log::{log_debug, log_warn};
use hsa::*;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// The contexts of the live intercept queues, by queue address. A context
/// is boxed: its address, registered with the runtime, never moves.
static LIVE: Mutex<Option<HashMap<u64, Box<QueueContext>>>> = Mutex::new(None);

fn live() -> std::sync::MutexGuard<'static, Option<HashMap<u64, Box<QueueContext>>>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps `context` while its queue lives; the address to register.
fn keep(context: QueueContext) -> *const QueueContext {
    let boxed = Box::new(context);
    let at: *const QueueContext = &*boxed;
    live()
        .get_or_insert_with(HashMap::new)
        .insert(boxed.queue, boxed);
    at
}

/// Frees the context of a destroyed queue: how many queues are still
/// watched, `None` when it had none.
fn forget(queue: u64) -> Option<usize> {
    let mut live = live();
    let map = live.as_mut()?;
    map.remove(&queue)?;
    Some(map.len())
}

/// Instead of `hsa_queue_create`: an intercept queue with ditto's packet
/// callback; the plain original when the runtime cannot make one.
///
/// # Safety
/// `original` is the saved `hsa_queue_create`; the arguments are the
/// caller's, under that function's contract.
#[allow(clippy::too_many_arguments)]
pub unsafe fn create(
    tool: &'static HsaTool,
    original: HsaQueueCreateFn,
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    callback: QueueErrorCallback,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t {
    // SAFETY: the original entry with the caller's own arguments.
    let plain = || unsafe {
        original(
            agent,
            size,
            type_,
            callback,
            data,
            private_segment_size,
            group_segment_size,
            queue,
        )
    };
    // SAFETY: the caller's contract.
    unsafe {
        intercepted(
            tool,
            "hsa_queue_create",
            &plain,
            agent,
            size,
            type_,
            callback,
            data,
            private_segment_size,
            group_segment_size,
            queue,
        )
    }
}

/// Instead of ROCm 10's `hsa_amd_queue_create`: the descriptors in order,
/// each well-formed compute one an intercept queue as [`create`] makes it
/// (its priority and CU mask applied), every other one (SDMA, AIE, or one
/// the runtime must judge) passed to the original alone, untouched. As the
/// header specifies: a failed descriptor's `queue` is NULL, the others
/// stay created, the first error is returned.
///
/// # Safety
/// `original` is the saved `hsa_amd_queue_create`; `descs` holds
/// `num_descs` descriptors (or is null).
pub unsafe fn create_batch(
    tool: &'static HsaTool,
    original: HsaAmdQueueCreateFn,
    agent: hsa_agent_t,
    descs: *mut hsa_amd_queue_create_desc_t,
    num_descs: u32,
) -> hsa_status_t {
    if descs.is_null() || num_descs == 0 {
        // SAFETY: the caller's own arguments; the runtime answers them.
        return unsafe { original(agent, descs, num_descs) };
    }
    let mut first_error = HSA_STATUS_SUCCESS;
    for i in 0..num_descs as usize {
        // SAFETY: the caller passes num_descs descriptors.
        let d = unsafe { descs.add(i) };
        // SAFETY: the original with this one descriptor.
        let plain = move || unsafe { original(agent, d, 1) };
        // SAFETY: a field of the caller's descriptor.
        let queue = unsafe { &raw mut (*d).queue };
        // SAFETY: as above.
        let status = match unsafe { (*d).compute() } {
            // SAFETY: a well-formed compute descriptor: hsa_queue_create's
            // arguments (packets = bytes / 64, the default group segment).
            Some(c) => unsafe {
                let st = intercepted(
                    tool,
                    "hsa_amd_queue_create",
                    &plain,
                    agent,
                    (*d).queue_size_bytes / 64,
                    c.type_,
                    (*d).callback,
                    (*d).callback_data,
                    c.private_segment_size,
                    u32::MAX,
                    queue,
                );
                if st == HSA_STATUS_SUCCESS {
                    apply_descriptor(tool, (*d).queue, (*d).priority, &c);
                }
                st
            },
            None => plain(),
        };
        if status != HSA_STATUS_SUCCESS {
            // SAFETY: the caller's descriptor.
            unsafe { (*d).queue = std::ptr::null_mut() };
            if first_error == HSA_STATUS_SUCCESS {
                first_error = status;
            }
        }
    }
    first_error
}

/// The priority and CU mask a descriptor asked for, on the queue made for
/// it; a runtime that cannot set them leaves the queue as it is (logged).
fn apply_descriptor(
    tool: &HsaTool,
    queue: *mut hsa_queue_t,
    priority: u32,
    compute: &hsa_amd_compute_queue_params_t,
) {
    if priority != HSA_AMD_QUEUE_PRIORITY_NORMAL
        && let Some(set) = tool.amd.hsa_amd_queue_set_priority_fn
    {
        // SAFETY: the entry's signature (hsa_ext_amd.h), on the queue just
        // created.
        let st = unsafe {
            let set: unsafe extern "C" fn(*mut hsa_queue_t, u32) -> hsa_status_t =
                std::mem::transmute(set);
            set(queue, priority)
        };
        if st != HSA_STATUS_SUCCESS {
            log_debug!("cannot set priority {priority} on queue {queue:p} (status 0x{st:x})");
        }
    }
    if compute.cu_mask_count > 0
        && !compute.cu_mask.is_null()
        && let Some(set) = tool.amd.hsa_amd_queue_cu_set_mask_fn
    {
        // SAFETY: the entry's signature (hsa_ext_amd.h); the mask holds
        // cu_mask_count bits.
        let st = unsafe {
            let set: unsafe extern "C" fn(*const hsa_queue_t, u32, *const u32) -> hsa_status_t =
                std::mem::transmute(set);
            set(queue, compute.cu_mask_count, compute.cu_mask)
        };
        if st != HSA_STATUS_SUCCESS {
            log_debug!("cannot set the CU mask on queue {queue:p} (status 0x{st:x})");
        }
    }
}

/// An intercept queue with ditto's packet callback, made with the
/// original `queue_intercept_create` from `hsa_queue_create`'s arguments;
/// `plain()` (the application's own call) when the runtime cannot make one.
///
/// # Safety
/// The arguments are the caller's, under `hsa_queue_create`'s contract.
#[allow(clippy::too_many_arguments)]
unsafe fn intercepted(
    tool: &'static HsaTool,
    entry: &'static str,
    plain: &dyn Fn() -> hsa_status_t,
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    callback: QueueErrorCallback,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t {
    let (Some(intercept_create), Some(register)) = (
        tool.amd.hsa_amd_queue_intercept_create_fn,
        tool.amd.hsa_amd_queue_intercept_register_fn,
    ) else {
        return plain();
    };
    // Once the intercept queue exists, a panic must not create a second queue.
    let created = AtomicBool::new(false);
    ffi_guard(
        entry,
        || {
            // SAFETY: the original intercept-create entry takes hsa_queue_create's arguments.
            let st = unsafe {
                intercept_create(
                    agent,
                    size,
                    type_,
                    callback,
                    data,
                    private_segment_size,
                    group_segment_size,
                    queue,
                )
            };
            if st != HSA_STATUS_SUCCESS || queue.is_null() {
                log_warn!(
                    "cannot create an intercept queue (status 0x{st:x}); this queue is not watched"
                );
                return plain();
            }
            created.store(true, Ordering::Relaxed);
            // SAFETY: `queue` was just filled by a successful create.
            let q = unsafe { *queue };
            let context = keep(QueueContext {
                tool,
                queue: q as u64,
                agent: agent.handle,
            });
            // SAFETY: registering our handler on our intercept queue; the
            // context is kept until the queue is destroyed.
            let st = unsafe { register(q, Some(on_packets), context as *mut c_void) };
            if st != HSA_STATUS_SUCCESS {
                log_warn!(
                    "cannot register the packet callback (status 0x{st:x}); this queue is not watched"
                );
            } else {
                log_debug!("queue {q:p} intercepted (created through {entry})");
            }
            // Dispatch times on our `done` signals (the manifest's
            // duration_ns) are recorded only on queues with profiling on, in
            // ROCr as in the CPU runtime. It changes no result; a failure
            // only leaves durations out.
            if let Some(enable) = tool.amd.hsa_amd_profiling_set_profiler_enabled_fn {
                // SAFETY: original entry on the queue just created.
                let st = unsafe { enable(q, 1) };
                if st != HSA_STATUS_SUCCESS {
                    log_debug!(
                        "cannot enable profiling on queue {q:p} (status 0x{st:x}); no kernel durations"
                    );
                }
            }
            HSA_STATUS_SUCCESS
        },
        || {
            if created.load(Ordering::Relaxed) {
                HSA_STATUS_SUCCESS
            } else {
                plain()
            }
        },
    )
}

/// After `hsa_queue_destroy` succeeded: no callback of the queue can come
/// any more, so its context is freed, and the worker forgets the queue.
pub fn destroyed(tool: &HsaTool, queue: *mut hsa_queue_t) {
    if let Some(watched) = forget(queue as u64) {
        tool.submit(WorkerMessage::QueueDestroyed {
            queue: queue as u64,
        });
        log_debug!("queue {queue:p} destroyed; queues still watched: {watched}");
    }
}

//! The API-table entries ditto replaces, and nothing else: each calls the
//! original entry saved at OnLoad and records what the tool needs.
//! - `hsa_queue_create`: the queue becomes an intercept queue (created with
//!   the original amd_ext `queue_intercept_create`) with ditto's packet
//!   callback registered on it and profiling enabled (kernel durations);
//! - `hsa_amd_memory_pool_allocate` / `_free`: the allocation map (and the
//!   IPC handle cache, forgotten on free);
//! - `hsa_executable_freeze`: the kernel table, after the original freeze.
//!
//! A panic inside ditto's part of a wrap is caught; the application gets
//! the original entry's behaviour and status.

use super::packet::on_packets;
use super::tool::{HsaTool, QueueContext, TOOL};
use crate::guard::ffi_guard;
use crate::kernel_table::KernelInfo;
use crate::log::{log_debug, log_info, log_warn};
use hsa::*;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

fn tool() -> Option<&'static HsaTool> {
    TOOL.get()
}

/// Replaces `hsa_queue_create_fn`.
///
/// # Safety
/// Called by the runtime's trampoline with `hsa_queue_create`'s arguments.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn queue_create(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    callback: QueueErrorCallback,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t {
    let Some(tool) = tool() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let Some(original) = tool.core.hsa_queue_create_fn else {
        return HSA_STATUS_ERROR;
    };
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
    let (Some(create), Some(register)) = (
        tool.amd.hsa_amd_queue_intercept_create_fn,
        tool.amd.hsa_amd_queue_intercept_register_fn,
    ) else {
        return plain();
    };
    // Once the intercept queue exists, a panic must not create a second queue.
    let created = AtomicBool::new(false);
    ffi_guard(
        "hsa_queue_create",
        || {
            // SAFETY: the original intercept-create entry takes hsa_queue_create's arguments.
            let st = unsafe {
                create(
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
            let ctx = Box::into_raw(Box::new(QueueContext {
                tool,
                queue: q as u64,
            }));
            // SAFETY: registering our handler on our intercept queue; `ctx` is leaked
            // on purpose: it must outlive every callback of the queue.
            let st = unsafe { register(q, Some(on_packets), ctx as *mut c_void) };
            if st != HSA_STATUS_SUCCESS {
                log_warn!(
                    "cannot register the packet callback (status 0x{st:x}); this queue is not watched"
                );
            } else {
                log_debug!("queue {q:p} intercepted");
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

/// Replaces `hsa_amd_memory_pool_allocate_fn`.
///
/// # Safety
/// Called by the runtime's trampoline with the entry's arguments.
pub unsafe extern "C" fn memory_pool_allocate(
    pool: hsa_amd_memory_pool_t,
    size: usize,
    flags: u32,
    ptr: *mut *mut c_void,
) -> hsa_status_t {
    let Some(tool) = tool() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let Some(original) = tool.amd.hsa_amd_memory_pool_allocate_fn else {
        return HSA_STATUS_ERROR;
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { original(pool, size, flags, ptr) };
    if st == HSA_STATUS_SUCCESS && !ptr.is_null() {
        ffi_guard(
            "hsa_amd_memory_pool_allocate",
            // SAFETY: a successful allocate filled `*ptr`.
            || tool.record_allocation(unsafe { *ptr } as u64, size as u64),
            || (),
        );
    }
    st
}

/// Replaces `hsa_amd_memory_pool_free_fn`.
///
/// # Safety
/// Called by the runtime's trampoline with the entry's arguments.
pub unsafe extern "C" fn memory_pool_free(ptr: *mut c_void) -> hsa_status_t {
    let Some(tool) = tool() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let Some(original) = tool.amd.hsa_amd_memory_pool_free_fn else {
        return HSA_STATUS_ERROR;
    };
    // Forget first: no handle of a freed range may be exported.
    ffi_guard(
        "hsa_amd_memory_pool_free",
        || tool.forget_allocation(ptr as u64),
        || (),
    );
    // SAFETY: the original entry with the caller's argument.
    unsafe { original(ptr) }
}

/// Replaces `hsa_executable_freeze_fn`.
///
/// # Safety
/// Called by the runtime's trampoline with the entry's arguments.
pub unsafe extern "C" fn executable_freeze(
    executable: hsa_executable_t,
    options: *const c_char,
) -> hsa_status_t {
    let Some(tool) = tool() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let Some(original) = tool.core.hsa_executable_freeze_fn else {
        return HSA_STATUS_ERROR;
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { original(executable, options) };
    if st == HSA_STATUS_SUCCESS {
        ffi_guard(
            "hsa_executable_freeze",
            || record_kernels(tool, executable),
            || (),
        );
    }
    st
}

unsafe extern "C" fn collect_symbol(
    _executable: hsa_executable_t,
    symbol: hsa_executable_symbol_t,
    data: *mut c_void,
) -> hsa_status_t {
    // SAFETY: `data` is the Vec passed by record_kernels, alive during iteration.
    let symbols = unsafe { &mut *(data as *mut Vec<hsa_executable_symbol_t>) };
    ffi_guard("symbol iteration", || symbols.push(symbol), || ());
    HSA_STATUS_SUCCESS
}

/// Reads one fixed-size symbol attribute.
fn symbol_info<T: Default>(
    tool: &HsaTool,
    symbol: hsa_executable_symbol_t,
    attribute: u32,
) -> Option<T> {
    let get = tool.core.hsa_executable_symbol_get_info_fn?;
    let mut value = T::default();
    // SAFETY: original entry; `value` has the attribute's size (u32 or u64 as documented).
    let st = unsafe { get(symbol, attribute, &mut value as *mut T as *mut c_void) };
    (st == HSA_STATUS_SUCCESS).then_some(value)
}

fn symbol_name(tool: &HsaTool, symbol: hsa_executable_symbol_t) -> Option<String> {
    let len: u32 = symbol_info(tool, symbol, HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH)?;
    let get = tool.core.hsa_executable_symbol_get_info_fn?;
    // One spare byte: some runtimes write a terminating NUL.
    let mut buf = vec![0u8; len as usize + 1];
    // SAFETY: original entry; NAME writes NAME_LENGTH bytes into `buf`.
    let st = unsafe {
        get(
            symbol,
            HSA_EXECUTABLE_SYMBOL_INFO_NAME,
            buf.as_mut_ptr() as *mut c_void,
        )
    };
    if st != HSA_STATUS_SUCCESS {
        return None;
    }
    buf.truncate(len as usize);
    if let Some(nul) = buf.iter().position(|&b| b == 0) {
        buf.truncate(nul);
    }
    String::from_utf8(buf).ok()
}

/// Records every kernel of a frozen executable in the kernel table.
fn record_kernels(tool: &HsaTool, executable: hsa_executable_t) {
    let Some(iterate) = tool.core.hsa_executable_iterate_symbols_fn else {
        return;
    };
    let mut symbols: Vec<hsa_executable_symbol_t> = Vec::new();
    // SAFETY: original entry; the callback only pushes into `symbols`.
    let st = unsafe {
        iterate(
            executable,
            Some(collect_symbol),
            &mut symbols as *mut _ as *mut c_void,
        )
    };
    if st != HSA_STATUS_SUCCESS {
        log_warn!(
            "cannot list the kernels of a frozen executable (status 0x{st:x}); its dispatches are not seen"
        );
        return;
    }
    for symbol in symbols {
        let kind: u32 =
            symbol_info(tool, symbol, HSA_EXECUTABLE_SYMBOL_INFO_TYPE).unwrap_or(u32::MAX);
        if kind != HSA_SYMBOL_KIND_KERNEL {
            continue;
        }
        let (Some(name), Some(kernel_object), Some(kernarg_size)) = (
            symbol_name(tool, symbol),
            symbol_info::<u64>(tool, symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT),
            symbol_info::<u32>(
                tool,
                symbol,
                HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
            ),
        ) else {
            continue;
        };
        let query = tool.options.kernel.as_deref();
        let (kernel, problem) = KernelInfo::new(
            &name,
            kernarg_size,
            query,
            tool.options.arg_types.as_deref(),
        );
        if let Some(problem) = problem {
            log_warn!(
                "`{}` matches DITTO_KERNEL but cannot be captured: {problem}",
                kernel.name.demangled
            );
        } else if kernel.is_target {
            log_info!(
                "target kernel `{}` loaded (kernel object 0x{kernel_object:x})",
                kernel.name.demangled
            );
        }
        tool.kernels.insert(kernel_object, kernel);
    }
}

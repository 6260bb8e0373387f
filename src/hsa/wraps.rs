//! The API-table entries ditto replaces, and nothing else: each calls the
//! original entry saved at OnLoad and records what the tool needs.
//! - `hsa_queue_create`: the queue becomes an intercept queue (created with
//!   the original amd_ext `queue_intercept_create`) with ditto's packet
//!   callback registered on it and profiling enabled (kernel durations);
//! - `hsa_amd_memory_pool_allocate` / `_free`: the allocation map (and the
//!   IPC handle cache, forgotten on free);
//! - `hsa_code_object_reader_create_from_memory` / `_destroy`: a copy of the
//!   code object's bytes per reader (ROCr keeps only the caller's pointer);
//! - `hsa_executable_load_agent_code_object`: which code objects each
//!   executable holds;
//! - `hsa_executable_freeze`: the kernel table, after the original freeze,
//!   with layouts from the loaded code objects' metadata where they have it.
//!
//! A panic inside ditto's part of a wrap is caught; the application gets
//! the original entry's behaviour and status.

use super::packet::on_packets;
use super::tool::{HsaTool, QueueContext, TOOL};
use crate::guard::ffi_guard;
use crate::kernel_table::KernelInfo;
use crate::log::{log_debug, log_info, log_warn};
use ditto_kernels::CodeObjectKernel;
use hsa::*;
use std::collections::HashMap;
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

/// Replaces `hsa_code_object_reader_create_from_memory_fn`.
///
/// # Safety
/// Called by the runtime's trampoline with the entry's arguments.
pub unsafe extern "C" fn code_object_reader_create_from_memory(
    code_object: *const c_void,
    size: usize,
    reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t {
    let Some(tool) = tool() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarded from the runtime's call.
    unsafe { create_reader(tool, code_object, size, reader) }
}

/// The original reader create, then a copy of the `size` bytes at
/// `code_object` kept under the new reader.
///
/// # Safety
/// `hsa_code_object_reader_create_from_memory`'s contract: `code_object`
/// readable for `size` bytes, `reader` a valid out-pointer.
pub unsafe fn create_reader(
    tool: &HsaTool,
    code_object: *const c_void,
    size: usize,
    reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t {
    let Some(original) = tool.core.hsa_code_object_reader_create_from_memory_fn else {
        return HSA_STATUS_ERROR;
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { original(code_object, size, reader) };
    if st == HSA_STATUS_SUCCESS && !code_object.is_null() && !reader.is_null() {
        ffi_guard(
            "hsa_code_object_reader_create_from_memory",
            || {
                // SAFETY: the runtime accepted `size` bytes at `code_object`, which
                // the caller must keep valid until this call returns at least.
                let bytes = unsafe { std::slice::from_raw_parts(code_object as *const u8, size) };
                // SAFETY: a successful create filled `*reader`.
                tool.remember_code_object(unsafe { (*reader).handle }, bytes);
            },
            || (),
        );
    }
    st
}

/// Replaces `hsa_code_object_reader_destroy_fn`.
///
/// # Safety
/// Called by the runtime's trampoline with the entry's arguments.
pub unsafe extern "C" fn code_object_reader_destroy(
    reader: hsa_code_object_reader_t,
) -> hsa_status_t {
    let Some(tool) = tool() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let Some(original) = tool.core.hsa_code_object_reader_destroy_fn else {
        return HSA_STATUS_ERROR;
    };
    // SAFETY: the original entry with the caller's argument.
    let st = unsafe { original(reader) };
    if st == HSA_STATUS_SUCCESS {
        ffi_guard(
            "hsa_code_object_reader_destroy",
            || tool.forget_reader(reader.handle),
            || (),
        );
    }
    st
}

/// Replaces `hsa_executable_load_agent_code_object_fn`.
///
/// # Safety
/// Called by the runtime's trampoline with the entry's arguments.
pub unsafe extern "C" fn executable_load_agent_code_object(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    reader: hsa_code_object_reader_t,
    options: *const c_char,
    loaded_code_object: *mut hsa_loaded_code_object_t,
) -> hsa_status_t {
    let Some(tool) = tool() else {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarded from the runtime's call.
    unsafe { load_code_object(tool, executable, agent, reader, options, loaded_code_object) }
}

/// The original load, then `reader`'s code object recorded as part of
/// `executable`.
///
/// # Safety
/// `hsa_executable_load_agent_code_object`'s contract.
pub unsafe fn load_code_object(
    tool: &HsaTool,
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    reader: hsa_code_object_reader_t,
    options: *const c_char,
    loaded_code_object: *mut hsa_loaded_code_object_t,
) -> hsa_status_t {
    let Some(original) = tool.core.hsa_executable_load_agent_code_object_fn else {
        return HSA_STATUS_ERROR;
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { original(executable, agent, reader, options, loaded_code_object) };
    if st == HSA_STATUS_SUCCESS {
        ffi_guard(
            "hsa_executable_load_agent_code_object",
            || tool.code_object_loaded(executable.handle, reader.handle),
            || (),
        );
    }
    st
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
    let metadata: HashMap<String, CodeObjectKernel> = tool.take_kernel_metadata(executable.handle);
    let mut loaded = Vec::with_capacity(symbols.len());
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
        let (kernel, problem) = KernelInfo::from_code_object(
            &name,
            kernarg_size,
            query,
            tool.options.arg_types.as_deref(),
            metadata.get(&name),
        );
        if let (Some(warning), true) = (&problem, kernel.signature.is_some()) {
            log_warn!("{warning}");
        } else if let Some(problem) = problem {
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
        loaded.push((kernel_object, kernel));
    }
    // One new snapshot of the kernel table per executable.
    tool.kernels.insert_all(loaded);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;

    const TEMPLATES_V5: &[u8] =
        include_bytes!("../../crates/kernels/tests/fixtures/templates-v5.co");

    /// Like ROCr: hands out a reader and keeps only the caller's pointer.
    unsafe extern "C" fn pointer_keeping_create(
        _code_object: *const c_void,
        _size: usize,
        reader: *mut hsa_code_object_reader_t,
    ) -> hsa_status_t {
        // SAFETY: valid out-pointer from the caller.
        unsafe { (*reader).handle = 0x5eed };
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn accepting_load(
        _executable: hsa_executable_t,
        _agent: hsa_agent_t,
        _reader: hsa_code_object_reader_t,
        _options: *const c_char,
        _loaded: *mut hsa_loaded_code_object_t,
    ) -> hsa_status_t {
        HSA_STATUS_SUCCESS
    }

    fn tool_with_loader() -> HsaTool {
        // SAFETY: all-zero tables are valid (every entry None).
        let mut core: CoreApiTable = unsafe { std::mem::zeroed() };
        core.hsa_code_object_reader_create_from_memory_fn = Some(pointer_keeping_create);
        core.hsa_executable_load_agent_code_object_fn = Some(accepting_load);
        // SAFETY: as above.
        let amd: AmdExtTable = unsafe { std::mem::zeroed() };
        HsaTool::new(Options::from_lookup(|_| None), core, amd, 0).0
    }

    #[test]
    fn a_reader_copy_survives_the_caller_freeing_its_buffer() {
        let tool = tool_with_loader();
        let mut buffer = TEMPLATES_V5.to_vec();
        let mut reader = hsa_code_object_reader_t::default();
        // SAFETY: `buffer` is readable for its length; `reader` is a valid out-pointer.
        let st = unsafe {
            create_reader(
                &tool,
                buffer.as_ptr() as *const c_void,
                buffer.len(),
                &mut reader,
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(reader.handle, 0x5eed);
        // The application overwrites and frees its copy, as CLR may.
        buffer.fill(0);
        drop(buffer);
        let executable = hsa_executable_t { handle: 0xe0 };
        // SAFETY: the fake load ignores every pointer.
        let st = unsafe {
            load_code_object(
                &tool,
                executable,
                hsa_agent_t { handle: 1 },
                reader,
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        let metadata = tool.take_kernel_metadata(executable.handle);
        let symbol = "_Z12scale_valuesIdEvPT_S1_S0_i.kd";
        let kernel = metadata.get(symbol).expect("metadata of the freed buffer");
        assert_eq!(kernel.kernarg_segment_size, 288);
        let (info, problem) = KernelInfo::from_code_object(
            symbol,
            288,
            Some("scale_values<double>"),
            None,
            Some(kernel),
        );
        assert_eq!(problem, None);
        let offsets: Vec<_> = info
            .signature
            .expect("a layout")
            .params
            .iter()
            .map(|p| (p.offset, p.size))
            .collect();
        assert_eq!(offsets, vec![(0, 8), (8, 8), (16, 8), (24, 4)]);
        // Taken once: a second freeze of the same handle finds nothing.
        assert!(tool.take_kernel_metadata(executable.handle).is_empty());
    }

    #[test]
    fn a_code_object_loaded_from_an_unknown_reader_adds_no_metadata() {
        let tool = tool_with_loader();
        tool.code_object_loaded(0xe1, 0x1234);
        assert!(tool.take_kernel_metadata(0xe1).is_empty());
        // A host ELF (the CPU runtime's code objects) has no AMDGPU metadata.
        let host = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        tool.remember_code_object(0x99, &host);
        tool.code_object_loaded(0xe2, 0x99);
        assert!(tool.take_kernel_metadata(0xe2).is_empty());
    }
}

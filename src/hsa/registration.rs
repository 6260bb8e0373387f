//! How the runtime finds and starts the tool: the exported
//! `HSA_AMD_TOOL_PRIORITY`, `OnLoad` and `OnUnload`, and the start-up state
//! machine (uninitialised → initialising → enabled | disabled) that makes a
//! second or late call do the safe thing. Owns the order of start-up:
//! options, table checks, saved originals, worker, then the table writes.

use super::tool::{HsaTool, TOOL};
use super::wraps;
use crate::guard::ffi_guard;
use crate::log::{self, log_error, log_info, log_warn};
use crate::options::Options;
use crate::worker::{self, WorkerConfig};
use ditto_protocol::{Hello, PROTOCOL_VERSION};
use hsa::*;
use std::ffi::{c_char, c_void};
use std::mem::offset_of;
use std::sync::atomic::{AtomicU8, Ordering};

/// Priority among tools the runtime discovers by this symbol.
#[unsafe(no_mangle)]
pub static HSA_AMD_TOOL_PRIORITY: u32 = 50;

const UNINITIALISED: u8 = 0;
const INITIALISING: u8 = 1;
const ENABLED: u8 = 2;
const DISABLED: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINITIALISED);

/// Whether the table's `minor_id` (its size) covers the field at `offset`.
fn covers(version: &ApiTableVersion, offset: usize) -> bool {
    version.minor_id as usize >= offset + std::mem::size_of::<usize>()
}

/// Called by the runtime inside hsa_init with its live API table.
///
/// # Safety
/// `table` is the runtime's live `HsaApiTable` (or null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn OnLoad(
    table: *mut HsaApiTable,
    _runtime_version: u64,
    _failed_tool_count: u64,
    _failed_tool_names: *const *const c_char,
) -> bool {
    if STATE
        .compare_exchange(
            UNINITIALISED,
            INITIALISING,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        log_info!(
            "OnLoad called again (hsa_init after hsa_shut_down?); this process is captured only once"
        );
        return true;
    }
    let (ok, state) = ffi_guard(
        "OnLoad",
        // SAFETY: forwarded from the runtime's call.
        || unsafe { start(table) },
        || (true, DISABLED),
    );
    STATE.store(state, Ordering::Release);
    ok
}

/// Start-up proper. Returns (OnLoad's answer, the final state). Nothing in
/// the table is written unless every check passed.
unsafe fn start(table: *mut HsaApiTable) -> (bool, u8) {
    let options = Options::from_env();
    log::set_level(options.log);
    for problem in &options.problems {
        log_warn!("{problem}");
    }
    let Some(query) = options.kernel.clone() else {
        log_info!("DITTO_KERNEL is not set; the tool stays passive");
        return (true, DISABLED);
    };
    if let Some(fatal) = &options.fatal {
        log_error!("{fatal}; nothing will be captured");
        return (true, DISABLED);
    }
    if options.socket.is_none() {
        log_warn!(
            "DITTO_KERNEL is set but DITTO_SOCKET is not; nothing will be captured (run through `ditto run` or scripts/ditto-run)"
        );
        return (true, DISABLED);
    }
    if table.is_null() {
        log_error!("OnLoad got no API table; nothing will be captured");
        return (false, DISABLED);
    }
    // SAFETY: the runtime passes a valid root table whose sub-tables are valid
    // for at least their `minor_id` bytes.
    let (core, amd) = unsafe { ((*table).core_, (*table).amd_ext_) };
    if core.is_null() || amd.is_null() {
        log_error!(
            "OnLoad's API table has no core or AMD extension table; nothing will be captured"
        );
        return (false, DISABLED);
    }
    // SAFETY: as above; reading the version headers.
    let (core_version, amd_version) = unsafe { ((*core).version, (*amd).version) };
    let needed_core = [
        (
            "hsa_queue_create",
            offset_of!(CoreApiTable, hsa_queue_create_fn),
        ),
        (
            "hsa_signal_create",
            offset_of!(CoreApiTable, hsa_signal_create_fn),
        ),
        (
            "hsa_signal_store_relaxed",
            offset_of!(CoreApiTable, hsa_signal_store_relaxed_fn),
        ),
        (
            "hsa_signal_store_screlease",
            offset_of!(CoreApiTable, hsa_signal_store_screlease_fn),
        ),
        (
            "hsa_signal_wait_scacquire",
            offset_of!(CoreApiTable, hsa_signal_wait_scacquire_fn),
        ),
        (
            "hsa_executable_freeze",
            offset_of!(CoreApiTable, hsa_executable_freeze_fn),
        ),
        (
            "hsa_executable_symbol_get_info",
            offset_of!(CoreApiTable, hsa_executable_symbol_get_info_fn),
        ),
        (
            "hsa_executable_iterate_symbols",
            offset_of!(CoreApiTable, hsa_executable_iterate_symbols_fn),
        ),
    ];
    let needed_amd = [
        (
            "hsa_amd_memory_pool_allocate",
            offset_of!(AmdExtTable, hsa_amd_memory_pool_allocate_fn),
        ),
        (
            "hsa_amd_memory_pool_free",
            offset_of!(AmdExtTable, hsa_amd_memory_pool_free_fn),
        ),
        (
            "hsa_amd_ipc_memory_create",
            offset_of!(AmdExtTable, hsa_amd_ipc_memory_create_fn),
        ),
        (
            "hsa_amd_queue_intercept_create",
            offset_of!(AmdExtTable, hsa_amd_queue_intercept_create_fn),
        ),
        (
            "hsa_amd_queue_intercept_register",
            offset_of!(AmdExtTable, hsa_amd_queue_intercept_register_fn),
        ),
    ];
    let missing: Vec<&str> = needed_core
        .iter()
        .filter(|(_, off)| !covers(&core_version, *off))
        .chain(
            needed_amd
                .iter()
                .filter(|(_, off)| !covers(&amd_version, *off)),
        )
        .map(|(name, _)| *name)
        .collect();
    if !missing.is_empty() {
        log_error!(
            "the runtime's API table is older than ditto needs (core minor_id {}, AMD minor_id {}; missing {}); nothing will be captured",
            core_version.minor_id,
            amd_version.minor_id,
            missing.join(", ")
        );
        return (false, DISABLED);
    }
    // Save the originals: a copy of each table as it is now. Entries past a
    // table's minor_id are zeroed, never read from the runtime.
    // SAFETY: copying min(minor_id, size_of) bytes of each valid table.
    let (saved_core, saved_amd) =
        unsafe { (copy_table(core, core_version), copy_table(amd, amd_version)) };
    let unset: Vec<&str> = [
        ("hsa_queue_create", saved_core.hsa_queue_create_fn.is_some()),
        (
            "hsa_signal_create",
            saved_core.hsa_signal_create_fn.is_some(),
        ),
        (
            "hsa_signal_wait_scacquire",
            saved_core.hsa_signal_wait_scacquire_fn.is_some(),
        ),
        (
            "hsa_signal_store_screlease",
            saved_core.hsa_signal_store_screlease_fn.is_some(),
        ),
        (
            "hsa_executable_freeze",
            saved_core.hsa_executable_freeze_fn.is_some(),
        ),
        (
            "hsa_executable_iterate_symbols",
            saved_core.hsa_executable_iterate_symbols_fn.is_some(),
        ),
        (
            "hsa_amd_memory_pool_allocate",
            saved_amd.hsa_amd_memory_pool_allocate_fn.is_some(),
        ),
        (
            "hsa_amd_memory_pool_free",
            saved_amd.hsa_amd_memory_pool_free_fn.is_some(),
        ),
        (
            "hsa_amd_queue_intercept_create",
            saved_amd.hsa_amd_queue_intercept_create_fn.is_some(),
        ),
        (
            "hsa_amd_queue_intercept_register",
            saved_amd.hsa_amd_queue_intercept_register_fn.is_some(),
        ),
    ]
    .into_iter()
    .filter(|(_, present)| !present)
    .map(|(name, _)| name)
    .collect();
    if !unset.is_empty() {
        log_error!(
            "the runtime's API table has no {}; nothing will be captured",
            unset.join(", ")
        );
        return (false, DISABLED);
    }
    let timestamp_hz = timestamp_frequency(&saved_core);
    let hello = Hello {
        version: PROTOCOL_VERSION,
        pid: std::process::id(),
        run: options.run_name.clone(),
        kernel_query: query.clone(),
        command_line: command_line(),
        working_directory: std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
    };
    let config = WorkerConfig {
        socket: options.socket.clone(),
        hello,
        timeout: options.timeout,
    };
    let (tool, jobs) = HsaTool::new(options, saved_core, saved_amd, timestamp_hz);
    if TOOL.set(tool).is_err() {
        return (true, DISABLED);
    }
    let tool: &'static HsaTool = TOOL.get().expect("set above");
    let spawned = std::thread::Builder::new()
        .name("ditto-worker".into())
        .spawn(move || worker::run(tool, jobs, config, &tool.switch));
    if let Err(e) = spawned {
        log_error!("cannot start the worker thread: {e}; nothing will be captured");
        return (true, DISABLED);
    }
    // Every check passed: overwrite the live entries.
    // SAFETY: the fields are covered by minor_id (checked above); the runtime
    // expects tools to write their wraps into this table during OnLoad.
    unsafe {
        (*core).hsa_queue_create_fn = Some(wraps::queue_create);
        (*core).hsa_executable_freeze_fn = Some(wraps::executable_freeze);
        (*amd).hsa_amd_memory_pool_allocate_fn = Some(wraps::memory_pool_allocate);
        (*amd).hsa_amd_memory_pool_free_fn = Some(wraps::memory_pool_free);
    }
    // SAFETY: registering a plain extern "C" function with the C library.
    unsafe { libc::atexit(finish_at_exit) };
    log_info!("capturing kernel `{query}`");
    (true, ENABLED)
}

/// Copies a table's first `min(minor_id, size_of::<T>())` bytes; the rest stay zero (None).
unsafe fn copy_table<T: Copy>(table: *const T, version: ApiTableVersion) -> T {
    let len = (version.minor_id as usize).min(std::mem::size_of::<T>());
    // SAFETY: every table type is Copy and all-zero is valid (None entries, zero versions).
    let mut copy: T = unsafe { std::mem::zeroed() };
    // SAFETY: `table` is valid for `minor_id` bytes; `copy` for size_of::<T>().
    unsafe {
        std::ptr::copy_nonoverlapping(table as *const u8, &mut copy as *mut T as *mut u8, len)
    };
    copy
}

fn timestamp_frequency(core: &CoreApiTable) -> u64 {
    let Some(get) = core.hsa_system_get_info_fn else {
        return 0;
    };
    let mut hz: u64 = 0;
    // SAFETY: original entry; TIMESTAMP_FREQUENCY is a u64.
    let st = unsafe {
        get(
            HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY,
            &mut hz as *mut u64 as *mut c_void,
        )
    };
    if st == HSA_STATUS_SUCCESS { hz } else { 0 }
}

fn command_line() -> Vec<String> {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if !args.is_empty() {
        return args;
    }
    std::fs::read("/proc/self/cmdline")
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Called by the runtime at hsa_shut_down: Goodbye, then every held
/// dispatch released (bounded by DITTO_TIMEOUT_MS + 1 s).
#[unsafe(no_mangle)]
pub extern "C" fn OnUnload() {
    ffi_guard(
        "OnUnload",
        || {
            if STATE.load(Ordering::Acquire) == ENABLED {
                if let Some(tool) = TOOL.get() {
                    tool.finish("hsa_shut_down");
                }
                STATE.store(DISABLED, Ordering::Release);
            }
        },
        || (),
    );
}

extern "C" fn finish_at_exit() {
    ffi_guard(
        "exit",
        || {
            if let Some(tool) = TOOL.get() {
                tool.finish("process exit");
            }
        },
        || (),
    );
}

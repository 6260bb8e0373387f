//! How the runtime finds and starts the tool: the exported
//! `HSA_AMD_TOOL_PRIORITY`, `OnLoad` and `OnUnload`, and the start-up state
//! machine (uninitialised → initialising → enabled | disabled) that makes a
//! second or late call do the safe thing. Owns the order of start-up:
//! options, table checks, saved originals, worker, then the table writes.

use super::tool::{HsaTool, TOOL};
use super::wraps;
use crate::guard::{ffi_guard, panic_message};
use crate::log::{self, log_error, log_info, log_warn};
use crate::options::Options;
use crate::worker::{self, Device, WorkerConfig, WorkerMessage};
use ditto_protocol::{Hello, PROTOCOL_VERSION};
use hsa::*;
use std::ffi::{c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU8, Ordering};

/// Priority among tools the runtime discovers by this symbol.
#[unsafe(no_mangle)]
pub static HSA_AMD_TOOL_PRIORITY: u32 = 50;

const UNINITIALISED: u8 = 0;
const INITIALISING: u8 = 1;
const ENABLED: u8 = 2;
const DISABLED: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINITIALISED);

/// The original entries ditto cannot work without, each named once:
/// `(name, present in this saved table)`.
macro_rules! required {
    ($table:ident: $($field:ident),+ $(,)?) => {
        [$((
            stringify!($field).trim_end_matches("_fn"),
            $table.$field.is_some(),
        )),+]
    };
}

/// Names of the required entries absent from the saved tables: unset, or
/// past the table's `minor_id` (an older runtime), which `copy_table` left
/// zero.
fn missing_entries(core: &CoreApiTable, amd: &AmdExtTable) -> Vec<&'static str> {
    let core_entries = required!(core:
        hsa_queue_create_fn,
        hsa_signal_create_fn,
        hsa_signal_store_relaxed_fn,
        hsa_signal_store_screlease_fn,
        hsa_signal_wait_scacquire_fn,
        hsa_executable_freeze_fn,
        hsa_executable_symbol_get_info_fn,
        hsa_executable_iterate_symbols_fn,
    );
    let amd_entries = required!(amd:
        hsa_amd_memory_pool_allocate_fn,
        hsa_amd_memory_pool_free_fn,
        hsa_amd_ipc_memory_create_fn,
        hsa_amd_queue_intercept_create_fn,
        hsa_amd_queue_intercept_register_fn,
    );
    core_entries
        .into_iter()
        .chain(amd_entries)
        .filter(|(_, present)| !present)
        .map(|(name, _)| name)
        .collect()
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
        ffi_guard(
            "OnLoad",
            || {
                log_info!(
                    "OnLoad called again (hsa_init after hsa_shut_down?); this process is captured only once"
                )
            },
            || (),
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
    // Save the originals: a copy of each table as it is now. Entries past a
    // table's minor_id are zeroed, never read from the runtime.
    // SAFETY: copying min(minor_id, size_of) bytes of each valid table.
    let (saved_core, saved_amd) =
        unsafe { (copy_table(core, core_version), copy_table(amd, amd_version)) };
    let missing = missing_entries(&saved_core, &saved_amd);
    if !missing.is_empty() {
        log_error!(
            "the runtime's API table has no {} (core minor_id {}, AMD minor_id {}); nothing will be captured",
            missing.join(", "),
            core_version.minor_id,
            amd_version.minor_id
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
        rank: options.rank,
    };
    let config = WorkerConfig {
        socket: options.socket.clone(),
        hello,
        timeout: options.timeout,
        capture: options.capture,
        arg_sizes: options.arg_sizes.clone(),
        dispatch: options.dispatch.clone(),
        staging_bytes: options.staging_bytes,
    };
    let (tool, jobs) = HsaTool::new(options, saved_core, saved_amd, timestamp_hz);
    if TOOL.set(tool).is_err() {
        return (true, DISABLED);
    }
    let tool: &'static HsaTool = TOOL.get().expect("set above");
    // A child forked without exec has no worker thread: it must go passive.
    // SAFETY: registering a plain extern "C" function with the C library.
    let registered = unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    if registered != 0 {
        log_error!("cannot register a fork handler (error {registered}); nothing will be captured");
        return (true, DISABLED);
    }
    let spawned = std::thread::Builder::new()
        .name("ditto-worker".into())
        .spawn(move || run_worker(tool, jobs, config));
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
        // Optional: without them layouts come from kernel names alone. An
        // entry present in the saved copy lies within the table's minor_id.
        if tool
            .core
            .hsa_code_object_reader_create_from_memory_fn
            .is_some()
            && tool.core.hsa_executable_load_agent_code_object_fn.is_some()
        {
            (*core).hsa_code_object_reader_create_from_memory_fn =
                Some(wraps::code_object_reader_create_from_memory);
            (*core).hsa_executable_load_agent_code_object_fn =
                Some(wraps::executable_load_agent_code_object);
            if tool.core.hsa_code_object_reader_destroy_fn.is_some() {
                (*core).hsa_code_object_reader_destroy_fn = Some(wraps::code_object_reader_destroy);
            }
        }
    }
    // SAFETY: registering a plain extern "C" function with the C library.
    unsafe { libc::atexit(finish_at_exit) };
    log_info!("capturing kernel `{query}`");
    (true, ENABLED)
}

/// The worker thread's body. A panic that escapes the worker's own
/// per-dispatch guards ends capture (logged once); the thread then keeps
/// releasing whatever is still sent to it, and answers the Shutdown, so no
/// later dispatch is held and `finish` does not wait out its bound.
fn run_worker(
    tool: &'static HsaTool,
    jobs: crossbeam_channel::Receiver<WorkerMessage>,
    config: WorkerConfig,
) {
    let after_panic = jobs.clone();
    let ran = catch_unwind(AssertUnwindSafe(|| {
        worker::run(tool, jobs, config, &tool.switch)
    }));
    if let Err(payload) = ran {
        tool.switch.fail(&format!(
            "internal error in the worker thread: {}",
            panic_message(payload.as_ref())
        ));
        for message in after_panic.iter() {
            match message {
                WorkerMessage::Job(job) => tool.release(&job.held),
                WorkerMessage::Missed { .. } => {}
                WorkerMessage::Shutdown { finished, .. } => {
                    let _ = finished.send(());
                    return;
                }
            }
        }
    }
}

/// `pthread_atfork` child handler: runs in a child forked WITHOUT exec (a
/// child that execs loads the tool afresh and is captured on its own
/// connection). Only the forking thread exists there, not the worker, and
/// on ROCr the HSA runtime is not usable in it: the tool goes passive, with
/// atomics only (another thread may have held any lock at the fork). No
/// Goodbye is sent (the connection is the parent's), nothing waits, and
/// every dispatch passes untouched. A panic is caught without logging,
/// which would take the stderr lock.
extern "C" fn forked_child() {
    let _ = catch_unwind(|| {
        if STATE.load(Ordering::Acquire) == ENABLED {
            STATE.store(DISABLED, Ordering::Release);
        }
        if let Some(tool) = TOOL.get() {
            tool.become_passive_in_forked_child();
        }
    });
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

pub(crate) fn command_line() -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn any_entry() {}

    /// A table of `T` whose every entry is set (to a function never called).
    fn full_table<T: Copy>(size: usize) -> T {
        let words = size / 8;
        let mut raw = vec![any_entry as *const () as usize; words];
        // Version header {major_id, minor_id = size, step_id, reserved}.
        raw[0] = 1 | (size << 32);
        raw[1] = 0;
        // SAFETY: `raw` holds size_of::<T>() bytes of function pointers after a
        // valid version header; every table entry is an Option<fn> or RawFn.
        unsafe { std::ptr::read(raw.as_ptr() as *const T) }
    }

    #[test]
    fn full_tables_miss_nothing() {
        let core: CoreApiTable = full_table(std::mem::size_of::<CoreApiTable>());
        let amd: AmdExtTable = full_table(std::mem::size_of::<AmdExtTable>());
        assert_eq!(missing_entries(&core, &amd), Vec::<&str>::new());
    }

    #[test]
    fn an_unset_ipc_export_entry_is_missing() {
        let core: CoreApiTable = full_table(std::mem::size_of::<CoreApiTable>());
        let mut amd: AmdExtTable = full_table(std::mem::size_of::<AmdExtTable>());
        amd.hsa_amd_ipc_memory_create_fn = None;
        assert_eq!(
            missing_entries(&core, &amd),
            vec!["hsa_amd_ipc_memory_create"]
        );
    }

    #[test]
    fn entries_past_an_older_tables_minor_id_are_missing() {
        let live: AmdExtTable = full_table(std::mem::size_of::<AmdExtTable>());
        let mut version = live.version;
        // An AMD table that ends just before the intercept entries.
        version.minor_id =
            std::mem::offset_of!(AmdExtTable, hsa_amd_queue_intercept_create_fn) as u32;
        // SAFETY: `live` is a whole table; fewer bytes are copied.
        let saved = unsafe { copy_table(&live, version) };
        let core: CoreApiTable = full_table(std::mem::size_of::<CoreApiTable>());
        assert_eq!(
            missing_entries(&core, &saved),
            vec![
                "hsa_amd_queue_intercept_create",
                "hsa_amd_queue_intercept_register"
            ]
        );
    }
}

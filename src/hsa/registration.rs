//! How the runtime finds and starts the tool: the exported
//! `HSA_AMD_TOOL_PRIORITY`, `OnLoad` and `OnUnload`. Owns the order of
//! start-up (options, table checks, saved originals, worker, then the
//! table writes) and moves the process's [`Lifecycle`](crate::lifecycle)
//! through it, so a second or late call does the safe thing.

use super::tool::{HsaTool, TOOL};
use super::worker::{self, HeldSignals, WorkerConfig, WorkerMessage};
use super::wraps::{self, LiveTables};
use crate::capture::ArgumentChoice;
use crate::capture::process::hello;
use crate::guard::{caught, ffi_guard, quietly};
use crate::lifecycle::{Lifecycle, PROCESS};
use crate::log::{self, log_error, log_info, log_warn};
use crate::options::Options;
use hsa::*;
use std::ffi::{c_char, c_void};

/// Priority among tools the runtime discovers by this symbol.
#[unsafe(no_mangle)]
pub static HSA_AMD_TOOL_PRIORITY: u32 = 50;

/// The original entries ditto calls without wrapping them and cannot work
/// without, each named once: `(name, present in this saved table)`.
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
/// zero. The required wraps first, then the entries called plainly.
fn missing_entries(core: &CoreApiTable, amd: &AmdExtTable) -> Vec<&'static str> {
    let core_entries = required!(core:
        hsa_signal_create_fn,
        hsa_signal_store_relaxed_fn,
        hsa_signal_store_screlease_fn,
        hsa_signal_wait_scacquire_fn,
        hsa_executable_symbol_get_info_fn,
        hsa_executable_iterate_symbols_fn,
    );
    let amd_entries = required!(amd:
        hsa_amd_ipc_memory_create_fn,
        hsa_amd_queue_intercept_create_fn,
        hsa_amd_queue_intercept_register_fn,
    );
    let plain = core_entries
        .into_iter()
        .chain(amd_entries)
        .filter(|(_, present)| !present)
        .map(|(name, _)| name);
    let mut missing = wraps::missing_required(core, amd);
    missing.extend(plain);
    missing
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
    if !PROCESS.begin() {
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
    let (ok, capturing) = ffi_guard(
        "OnLoad",
        // SAFETY: forwarded from the runtime's call.
        || unsafe { start(table, &PROCESS) },
        || (true, false),
    );
    if capturing {
        PROCESS.capture();
    } else {
        PROCESS.stay_passive();
    }
    ok
}

/// Start-up proper. Returns (OnLoad's answer, whether the tool captures).
/// Nothing in the table is written unless every check passed.
unsafe fn start(table: *mut HsaApiTable, lifecycle: &'static Lifecycle) -> (bool, bool) {
    let options = Options::from_env();
    log::set_level(options.log);
    for problem in &options.problems {
        log_warn!("{problem}");
    }
    let Some(query) = options.kernel.clone() else {
        log_info!("DITTO_KERNEL is not set; the tool stays passive");
        return (true, false);
    };
    if let Some(fatal) = &options.fatal {
        log_error!("{fatal}; nothing will be captured");
        return (true, false);
    }
    if options.socket.is_none() {
        log_warn!(
            "DITTO_KERNEL is set but DITTO_SOCKET is not; nothing will be captured (run through `ditto run` or scripts/ditto-run)"
        );
        return (true, false);
    }
    if table.is_null() {
        log_error!("OnLoad got no API table; nothing will be captured");
        return (false, false);
    }
    // SAFETY: the runtime passes a valid root table whose sub-tables are valid
    // for at least their `minor_id` bytes.
    let (core, amd) = unsafe { ((*table).core_, (*table).amd_ext_) };
    if core.is_null() || amd.is_null() {
        log_error!(
            "OnLoad's API table has no core or AMD extension table; nothing will be captured"
        );
        return (false, false);
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
        return (false, false);
    }
    let timestamp_hz = timestamp_frequency(&saved_core);
    let config = WorkerConfig {
        socket: options.socket.clone(),
        hello: hello(&options, &query),
        timeout: options.timeout,
        choice: ArgumentChoice {
            capture: options.capture,
            arg_sizes: options.arg_sizes.clone(),
        },
        dispatch: options.dispatch.clone(),
        staging_bytes: options.staging_bytes,
    };
    let (tool, jobs) = HsaTool::new(options, saved_core, saved_amd, timestamp_hz, lifecycle);
    if TOOL.set(tool).is_err() {
        return (true, false);
    }
    let tool: &'static HsaTool = TOOL.get().expect("set above");
    // A child forked without exec has no worker thread: it must go passive.
    // SAFETY: registering a plain extern "C" function with the C library.
    let registered = unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    if registered != 0 {
        log_error!("cannot register a fork handler (error {registered}); nothing will be captured");
        return (true, false);
    }
    let spawned = std::thread::Builder::new()
        .name("ditto-worker".into())
        .spawn(move || run_worker(tool, jobs, config));
    if let Err(e) = spawned {
        log_error!("cannot start the worker thread: {e}; nothing will be captured");
        return (true, false);
    }
    // Every check passed: overwrite the live entries (the optional ones
    // where the runtime has them: an entry present in the saved copy lies
    // within the table's minor_id).
    // SAFETY: the live tables the runtime passed; tools write their wraps
    // into them during OnLoad.
    unsafe { wraps::install(&LiveTables { core, amd }, tool) };
    // SAFETY: registering a plain extern "C" function with the C library.
    unsafe { libc::atexit(finish_at_exit) };
    log_info!("capturing kernel `{query}`");
    (true, true)
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
    let ran = caught(|| worker::run(tool, jobs, config, tool.lifecycle));
    if let Err(panic) = ran {
        tool.lifecycle
            .fail(&format!("internal error in the worker thread: {panic}"));
        for message in after_panic.iter() {
            match message {
                WorkerMessage::Job(job) => tool.release(&job.held),
                WorkerMessage::Missed { .. } | WorkerMessage::QueueDestroyed { .. } => {}
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
    quietly(|| PROCESS.forked_child());
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

/// Called by the runtime at hsa_shut_down: Goodbye, then every held
/// dispatch released (bounded by DITTO_TIMEOUT_MS + 1 s).
#[unsafe(no_mangle)]
pub extern "C" fn OnUnload() {
    ffi_guard(
        "OnUnload",
        || {
            if let Some(tool) = TOOL.get() {
                tool.finish("hsa_shut_down");
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

    use crate::hsa::wraps::tests::full_table;

    #[test]
    fn full_tables_miss_nothing() {
        let core: CoreApiTable = full_table();
        let amd: AmdExtTable = full_table();
        assert_eq!(missing_entries(&core, &amd), Vec::<&str>::new());
    }

    #[test]
    fn an_unset_ipc_export_entry_is_missing() {
        let core: CoreApiTable = full_table();
        let mut amd: AmdExtTable = full_table();
        amd.hsa_amd_ipc_memory_create_fn = None;
        assert_eq!(
            missing_entries(&core, &amd),
            vec!["hsa_amd_ipc_memory_create"]
        );
    }

    #[test]
    fn entries_past_an_older_tables_minor_id_are_missing() {
        let live: AmdExtTable = full_table();
        let mut version = live.version;
        // An AMD table that ends just before the intercept entries.
        version.minor_id =
            std::mem::offset_of!(AmdExtTable, hsa_amd_queue_intercept_create_fn) as u32;
        // SAFETY: `live` is a whole table; fewer bytes are copied.
        let saved = unsafe { copy_table(&live, version) };
        let core: CoreApiTable = full_table();
        assert_eq!(
            missing_entries(&core, &saved),
            vec![
                "hsa_amd_queue_intercept_create",
                "hsa_amd_queue_intercept_register"
            ]
        );
    }
}

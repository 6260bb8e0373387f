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
use hsa::versions::{LiveTable, Table, UnknownTableVersion};
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
/// not in the table's version (which the copy left unset). The required
/// wraps first, then the entries called plainly.
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
                    "OnLoad called again (the tool was found twice, through HSA_TOOLS_LIB and preloaded, or hsa_init ran again after hsa_shut_down); this process is captured once"
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
    PROCESS.start_up_ended(capturing);
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
    // Each table laid out as its version says; one no measured ROCm
    // release has is refused before anything is read from it.
    // SAFETY: as above.
    let live = match unsafe { live_tables(core, amd) } {
        Ok(live) => live,
        Err(e) => {
            log_warn!("{e}; nothing will be captured and the application runs on unchanged");
            return (true, false);
        }
    };
    // Save the originals: a copy of each table as it is now, entry by entry
    // by name into the canonical (ROCm 5.2) layout; entries its version
    // lacks stay unset, never read from the runtime.
    // SAFETY: the tables are valid for their minor_id bytes.
    let (saved_core, saved_amd, saved_added) = unsafe {
        (
            live.core.core(),
            live.amd.amd_ext(),
            live.amd.amd_ext_additions(),
        )
    };
    let missing = missing_entries(&saved_core, &saved_amd);
    if !missing.is_empty() {
        let (c, a) = (live.core.version(), live.amd.version());
        log_error!(
            "the runtime's API table has no {} (core table version {}/{}, AMD {}/{}); nothing will be captured",
            missing.join(", "),
            c.major_id,
            c.minor_id,
            a.major_id,
            a.minor_id
        );
        return (false, false);
    }
    let timestamp_hz = timestamp_frequency(&saved_core);
    let config = WorkerConfig {
        socket: options.socket.clone(),
        hello: hello(&options, &query, ditto_protocol::Api::Hsa),
        timeout: options.timeout,
        choice: ArgumentChoice {
            capture: options.capture,
            arg_sizes: options.arg_sizes.clone(),
            interior_outputs_before: options.interior_outputs_before,
        },
        dispatch: options.dispatch.clone(),
        staging_bytes: options.staging_bytes,
        collector_uid: options.collector_uid,
    };
    let (mut tool, jobs) = HsaTool::new(options, saved_core, saved_amd, timestamp_hz, lifecycle);
    tool.amd_added = saved_added;
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
    // where the runtime has them), each at its version's offset.
    // SAFETY: the live tables the runtime passed; tools write their wraps
    // into them during OnLoad.
    unsafe { wraps::install(&live, tool) };
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

/// The live core and AMD extension tables, each with the layout its
/// version picks.
///
/// # Safety
/// Both point at the runtime's tables, valid for their `minor_id` bytes.
unsafe fn live_tables(
    core: *mut CoreApiTable,
    amd: *mut AmdExtTable,
) -> Result<LiveTables, UnknownTableVersion> {
    // SAFETY: the caller's contract.
    unsafe {
        Ok(LiveTables {
            core: LiveTable::new(Table::Core, core as *mut u8)?,
            amd: LiveTable::new(Table::AmdExt, amd as *mut u8)?,
        })
    }
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

    use crate::hsa::wraps::tests::{any_entry, full_table};

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
    fn a_table_version_no_release_has_is_refused_before_anything_is_read() {
        let mut core: CoreApiTable = full_table();
        let mut amd: AmdExtTable = full_table();
        // SAFETY: both are whole tables of this process.
        assert!(unsafe { live_tables(&mut core, &mut amd) }.is_ok());
        // A newer major, and a 5.x size no release had.
        for (major_id, minor_id) in [(3, 640), (1, 432)] {
            amd.version.major_id = major_id;
            amd.version.minor_id = minor_id;
            // SAFETY: as above (the version is only read).
            let e = unsafe { live_tables(&mut core, &mut amd) }
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!(
                    "AMD extension table is version {major_id}/{minor_id}"
                )),
                "{e}"
            );
        }
    }

    #[test]
    fn a_rocm_6_4_table_gives_the_entries_at_its_own_offsets() {
        let layout = hsa::versions::layout_of(Table::AmdExt, ApiTableVersion::new(2, 592, 0))
            .expect("6.4.3's layout");
        // A 592-byte table whose every entry holds a function of ours at
        // the 6.4.3 offset, and the 5.2 offsets in between hold others.
        let mut words = vec![any_entry as *const () as usize; 592 / 8];
        words[0] = 2 | (592 << 32);
        words[1] = 5;
        let at = layout
            .offset("hsa_amd_queue_intercept_create_fn", 592)
            .unwrap();
        words[at / 8] = other_entry as *const () as usize;
        let mut core: CoreApiTable = full_table();
        // SAFETY: `words` is a whole 592-byte table; `core` a whole table.
        let live = unsafe { live_tables(&mut core, words.as_mut_ptr() as *mut AmdExtTable) }
            .expect("6.4.3 is known");
        // SAFETY: as above.
        let saved = unsafe { live.amd.amd_ext() };
        assert_eq!(
            saved.hsa_amd_queue_intercept_create_fn.map(|f| f as usize),
            Some(other_entry as *const () as usize),
            "read from offset {at}, not 5.2's"
        );
        assert_eq!(missing_entries(&core, &saved), Vec::<&str>::new());
    }

    unsafe extern "C" fn other_entry() {}
}

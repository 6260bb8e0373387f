//! Signals: values, memory-order variants, blocking waits, wait_any.

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
use std::ffi::c_void;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

#[test]
fn wait_wakes_across_threads_for_every_condition() {
    init();
    // (condition, compare value, a value that does not satisfy it, one that does)
    for (cond, compare, other, satisfying) in [
        (HSA_SIGNAL_CONDITION_EQ, 0, 7, 0),
        (HSA_SIGNAL_CONDITION_NE, 10, 10, 11),
        (HSA_SIGNAL_CONDITION_LT, 5, 7, 4),
        (HSA_SIGNAL_CONDITION_GTE, 20, 7, 20),
    ] {
        let s = signal(10);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            store(s, other); // a change that does not satisfy: the waiter keeps waiting
            std::thread::sleep(Duration::from_millis(10));
            store(s, satisfying);
        });
        let start = Instant::now();
        // SAFETY: s is a live signal.
        let seen = unsafe {
            rt::hsa_signal_wait_scacquire(s, cond, compare, u64::MAX, HSA_WAIT_STATE_BLOCKED)
        };
        assert_eq!(seen, satisfying, "condition {cond}");
        assert!(
            start.elapsed() >= Duration::from_millis(35),
            "condition {cond} returned before the store"
        );
        t.join().unwrap();
        // SAFETY: s is a live signal.
        assert_eq!(unsafe { rt::hsa_signal_destroy(s) }, 0);
    }
}

#[test]
fn wait_returns_current_value_when_the_timeout_passes() {
    init();
    let s = signal(3);
    let start = Instant::now();
    // SAFETY: s is a live signal; 30 ms timeout in ns (frequency 1 GHz).
    let v = unsafe {
        rt::hsa_signal_wait_relaxed(
            s,
            HSA_SIGNAL_CONDITION_EQ,
            0,
            30_000_000,
            HSA_WAIT_STATE_BLOCKED,
        )
    };
    let waited = start.elapsed();
    assert_eq!(v, 3);
    assert!(
        waited >= Duration::from_millis(30) && waited < Duration::from_secs(5),
        "waited {waited:?}"
    );
}

#[test]
fn read_modify_write_variants_return_old_values_and_update() {
    init();
    let s = signal(0b1100);
    // SAFETY: s is a live signal throughout.
    unsafe {
        rt::hsa_signal_and_relaxed(s, 0b0110);
        assert_eq!(load(s), 0b0100);
        rt::hsa_signal_or_scacquire(s, 0b0001);
        assert_eq!(load(s), 0b0101);
        rt::hsa_signal_xor_screlease(s, 0b0011);
        assert_eq!(load(s), 0b0110);
        rt::hsa_signal_add_scacq_screl(s, 10);
        assert_eq!(load(s), 16);
        rt::hsa_signal_subtract_relaxed(s, 1);
        rt::hsa_signal_subtract_scacquire(s, 1);
        rt::hsa_signal_subtract_screlease(s, 1);
        rt::hsa_signal_subtract_scacq_screl(s, 1);
        assert_eq!(load(s), 12);
        assert_eq!(rt::hsa_signal_exchange_scacq_screl(s, 40), 12);
        assert_eq!(rt::hsa_signal_exchange_relaxed(s, 41), 40);
        assert_eq!(
            rt::hsa_signal_cas_scacquire(s, 0, 1),
            41,
            "failed CAS returns the observed value"
        );
        assert_eq!(load(s), 41);
        assert_eq!(rt::hsa_signal_cas_screlease(s, 41, 2), 41);
        assert_eq!(rt::hsa_signal_load_relaxed(s), 2);
        rt::hsa_signal_silent_store_relaxed(s, 9);
        assert_eq!(load(s), 9);
    }
}

#[test]
fn destroyed_signal_is_invalid_and_its_waits_return_zero() {
    init();
    let s = signal(1);
    // SAFETY: handles are validated by the runtime.
    unsafe {
        assert_eq!(rt::hsa_signal_destroy(s), 0);
        assert_eq!(rt::hsa_signal_destroy(s), HSA_STATUS_ERROR_INVALID_SIGNAL);
        assert_eq!(
            rt::hsa_signal_destroy(hsa_signal_t { handle: 0 }),
            HSA_STATUS_ERROR_INVALID_SIGNAL
        );
        assert_eq!(rt::hsa_signal_load_scacquire(s), 0);
        assert_eq!(
            rt::hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 5, u64::MAX, 0),
            0
        );
    }
}

#[test]
fn destroying_a_signal_releases_its_blocked_waiter() {
    init();
    let s = signal(1);
    let t = std::thread::spawn(move || {
        // SAFETY: s may be destroyed while waiting; the runtime tolerates it.
        unsafe { rt::hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 0, u64::MAX, 0) }
    });
    std::thread::sleep(Duration::from_millis(30));
    // SAFETY: s is live.
    assert_eq!(unsafe { rt::hsa_signal_destroy(s) }, 0);
    assert_eq!(
        t.join().unwrap(),
        1,
        "the waiter returns the last value it saw"
    );
}

#[test]
fn wait_any_returns_the_index_of_the_satisfied_signal() {
    init();
    let mut sigs = [signal(1), signal(1), signal(1)];
    let mut conds = [HSA_SIGNAL_CONDITION_EQ; 3];
    let mut values = [0i64; 3];
    let second = sigs[1];
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        store(second, 0);
    });
    let mut satisfying = -1i64;
    // SAFETY: arrays of 3 elements each.
    let index = unsafe {
        rt::hsa_amd_signal_wait_any(
            3,
            sigs.as_mut_ptr(),
            conds.as_mut_ptr(),
            values.as_mut_ptr(),
            u64::MAX,
            0,
            &mut satisfying,
        )
    };
    t.join().unwrap();
    assert_eq!((index, satisfying), (1, 0));
    // SAFETY: as above; nothing changes, so the 10 ms timeout expires.
    let index = unsafe {
        rt::hsa_amd_signal_wait_any(
            1,
            sigs[2..].as_mut_ptr(),
            conds.as_mut_ptr(),
            values.as_mut_ptr(),
            10_000_000,
            0,
            &mut satisfying,
        )
    };
    assert_eq!(index, u32::MAX);
}

#[test]
fn wait_any_reads_a_signal_destroyed_while_waited_on_as_zero() {
    init();
    let s = signal(1);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut sigs, mut conds, mut values) = ([s], [HSA_SIGNAL_CONDITION_EQ], [0i64]);
        let mut satisfying = -1i64;
        // SAFETY: arrays of 1 element each; s may be destroyed meanwhile.
        let index = unsafe {
            rt::hsa_amd_signal_wait_any(
                1,
                sigs.as_mut_ptr(),
                conds.as_mut_ptr(),
                values.as_mut_ptr(),
                u64::MAX,
                0,
                &mut satisfying,
            )
        };
        let _ = tx.send((index, satisfying));
    });
    std::thread::sleep(Duration::from_millis(30));
    // SAFETY: s is live.
    assert_eq!(unsafe { rt::hsa_signal_destroy(s) }, 0);
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)),
        Ok((0, 0)),
        "the wait returned, reading the destroyed handle as 0"
    );
}

#[test]
fn every_memory_order_variant_of_every_signal_operation_acts_on_the_value() {
    init();
    let s = signal(0);
    type Op = unsafe extern "C" fn(hsa_signal_t, i64);
    type Ret = unsafe extern "C" fn(hsa_signal_t, i64) -> i64;
    type Cas = unsafe extern "C" fn(hsa_signal_t, i64, i64) -> i64;
    // (name, operation, value before, operand, value after)
    let ops: [(&str, Op, i64, i64, i64); 24] = [
        (
            "and_relaxed",
            rt::hsa_signal_and_relaxed,
            0b1100,
            0b0110,
            0b0100,
        ),
        (
            "and_scacquire",
            rt::hsa_signal_and_scacquire,
            0b1100,
            0b0110,
            0b0100,
        ),
        (
            "and_screlease",
            rt::hsa_signal_and_screlease,
            0b1100,
            0b0110,
            0b0100,
        ),
        (
            "and_scacq_screl",
            rt::hsa_signal_and_scacq_screl,
            0b1100,
            0b0110,
            0b0100,
        ),
        (
            "or_relaxed",
            rt::hsa_signal_or_relaxed,
            0b1100,
            0b0110,
            0b1110,
        ),
        (
            "or_scacquire",
            rt::hsa_signal_or_scacquire,
            0b1100,
            0b0110,
            0b1110,
        ),
        (
            "or_screlease",
            rt::hsa_signal_or_screlease,
            0b1100,
            0b0110,
            0b1110,
        ),
        (
            "or_scacq_screl",
            rt::hsa_signal_or_scacq_screl,
            0b1100,
            0b0110,
            0b1110,
        ),
        (
            "xor_relaxed",
            rt::hsa_signal_xor_relaxed,
            0b1100,
            0b0110,
            0b1010,
        ),
        (
            "xor_scacquire",
            rt::hsa_signal_xor_scacquire,
            0b1100,
            0b0110,
            0b1010,
        ),
        (
            "xor_screlease",
            rt::hsa_signal_xor_screlease,
            0b1100,
            0b0110,
            0b1010,
        ),
        (
            "xor_scacq_screl",
            rt::hsa_signal_xor_scacq_screl,
            0b1100,
            0b0110,
            0b1010,
        ),
        ("add_relaxed", rt::hsa_signal_add_relaxed, 5, 7, 12),
        ("add_scacquire", rt::hsa_signal_add_scacquire, 5, 7, 12),
        ("add_screlease", rt::hsa_signal_add_screlease, 5, 7, 12),
        ("add_scacq_screl", rt::hsa_signal_add_scacq_screl, 5, 7, 12),
        (
            "subtract_relaxed",
            rt::hsa_signal_subtract_relaxed,
            5,
            7,
            -2,
        ),
        (
            "subtract_scacquire",
            rt::hsa_signal_subtract_scacquire,
            5,
            7,
            -2,
        ),
        (
            "subtract_screlease",
            rt::hsa_signal_subtract_screlease,
            5,
            7,
            -2,
        ),
        (
            "subtract_scacq_screl",
            rt::hsa_signal_subtract_scacq_screl,
            5,
            7,
            -2,
        ),
        ("store_relaxed", rt::hsa_signal_store_relaxed, 5, 7, 7),
        ("store_screlease", rt::hsa_signal_store_screlease, 5, 7, 7),
        (
            "silent_store_relaxed",
            rt::hsa_signal_silent_store_relaxed,
            5,
            7,
            7,
        ),
        (
            "silent_store_screlease",
            rt::hsa_signal_silent_store_screlease,
            5,
            7,
            7,
        ),
    ];
    let exchanges: [(&str, Ret); 4] = [
        ("exchange_relaxed", rt::hsa_signal_exchange_relaxed),
        ("exchange_scacquire", rt::hsa_signal_exchange_scacquire),
        ("exchange_screlease", rt::hsa_signal_exchange_screlease),
        ("exchange_scacq_screl", rt::hsa_signal_exchange_scacq_screl),
    ];
    let cases: [(&str, Cas); 4] = [
        ("cas_relaxed", rt::hsa_signal_cas_relaxed),
        ("cas_scacquire", rt::hsa_signal_cas_scacquire),
        ("cas_screlease", rt::hsa_signal_cas_screlease),
        ("cas_scacq_screl", rt::hsa_signal_cas_scacq_screl),
    ];
    // SAFETY: s is a live signal throughout.
    unsafe {
        for (name, op, before, operand, after) in ops {
            rt::hsa_signal_store_relaxed(s, before);
            op(s, operand);
            assert_eq!(rt::hsa_signal_load_relaxed(s), after, "{name}");
            assert_eq!(rt::hsa_signal_load_scacquire(s), after, "{name}");
        }
        for (name, op) in exchanges {
            rt::hsa_signal_store_relaxed(s, 3);
            assert_eq!(op(s, 4), 3, "{name} returns the old value");
            assert_eq!(load(s), 4, "{name}");
        }
        for (name, op) in cases {
            rt::hsa_signal_store_relaxed(s, 3);
            assert_eq!(
                op(s, 9, 5),
                3,
                "{name}: failed CAS returns the observed value"
            );
            assert_eq!(load(s), 3, "{name}: no swap on mismatch");
            assert_eq!(op(s, 3, 5), 3, "{name}");
            assert_eq!(load(s), 5, "{name}: swapped on match");
        }
        // Both wait variants, every condition, already satisfied and timed out.
        type Wait = unsafe extern "C" fn(hsa_signal_t, u32, i64, u64, u32) -> i64;
        let waits: [(&str, Wait); 2] = [
            ("wait_relaxed", rt::hsa_signal_wait_relaxed),
            ("wait_scacquire", rt::hsa_signal_wait_scacquire),
        ];
        rt::hsa_signal_store_relaxed(s, 5);
        for (name, wait) in waits {
            for (cond, compare, holds) in [
                (HSA_SIGNAL_CONDITION_EQ, 5, true),
                (HSA_SIGNAL_CONDITION_EQ, 6, false),
                (HSA_SIGNAL_CONDITION_NE, 6, true),
                (HSA_SIGNAL_CONDITION_NE, 5, false),
                (HSA_SIGNAL_CONDITION_LT, 6, true),
                (HSA_SIGNAL_CONDITION_LT, 5, false),
                (HSA_SIGNAL_CONDITION_GTE, 5, true),
                (HSA_SIGNAL_CONDITION_GTE, 6, false),
            ] {
                let t = Instant::now();
                let v = wait(s, cond, compare, 20_000_000, HSA_WAIT_STATE_BLOCKED);
                assert_eq!(v, 5, "{name} cond {cond} compare {compare}");
                let waited = t.elapsed();
                if holds {
                    assert!(waited < Duration::from_millis(15), "{name}: {waited:?}");
                } else {
                    assert!(waited >= Duration::from_millis(19), "{name}: {waited:?}");
                }
            }
        }
        rt::hsa_signal_destroy(s);
    }
}

/// CPU time consumed by the calling thread so far.
fn thread_cpu_time() -> Duration {
    // SAFETY: getrusage writes into a local struct.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut ru), 0);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[test]
fn blocked_wait_sleeps_instead_of_spinning() {
    init();
    let s = signal(1);
    let waiter = std::thread::spawn(move || {
        let (cpu, wall) = (thread_cpu_time(), Instant::now());
        // SAFETY: s is live until the main thread stores 0.
        let v = unsafe {
            rt::hsa_signal_wait_scacquire(
                s,
                HSA_SIGNAL_CONDITION_EQ,
                0,
                u64::MAX,
                HSA_WAIT_STATE_ACTIVE,
            )
        };
        (v, thread_cpu_time() - cpu, wall.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    store(s, 0);
    let (v, cpu, wall) = waiter.join().unwrap();
    assert_eq!(v, 0);
    assert!(
        wall >= Duration::from_millis(250),
        "really blocked: {wall:?}"
    );
    assert!(
        cpu < Duration::from_millis(30),
        "a {wall:?} wait used {cpu:?} of CPU time"
    );
    // SAFETY: s is live.
    unsafe { rt::hsa_signal_destroy(s) };
}

/// What an async handler saw: (value, thread name) per call.
struct HandlerLog {
    calls: std::sync::Mutex<Vec<(i64, String)>>,
    /// Calls after which the handler unregisters itself (returns false).
    keep_for: usize,
}

/// Set while any log_handler runs; OVERLAPPED if two ever ran at once.
static RUNNING: AtomicBool = AtomicBool::new(false);
static OVERLAPPED: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn log_handler(value: i64, arg: *mut c_void) -> bool {
    use std::sync::atomic::Ordering::SeqCst;
    // SAFETY: arg is a leaked HandlerLog.
    let log = unsafe { &*(arg as *const HandlerLog) };
    if RUNNING.swap(true, SeqCst) {
        OVERLAPPED.store(true, SeqCst);
    }
    std::thread::sleep(Duration::from_millis(5));
    let name = std::thread::current().name().unwrap_or("").to_string();
    let n = {
        let mut calls = log.calls.lock().unwrap();
        calls.push((value, name));
        calls.len()
    };
    RUNNING.store(false, SeqCst);
    n < log.keep_for
}

fn handler_log(keep_for: usize) -> &'static HandlerLog {
    Box::leak(Box::new(HandlerLog {
        calls: std::sync::Mutex::new(Vec::new()),
        keep_for,
    }))
}

fn wait_calls(log: &HandlerLog, n: usize) -> Vec<(i64, String)> {
    let end = Instant::now() + Duration::from_secs(10);
    while log.calls.lock().unwrap().len() < n && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    log.calls.lock().unwrap().clone()
}

fn register_handler(s: hsa_signal_t, cond: u32, value: i64, log: &'static HandlerLog) {
    // SAFETY: log lives for the process.
    let status = unsafe {
        rt::hsa_amd_signal_async_handler(
            s,
            cond,
            value,
            Some(log_handler),
            log as *const HandlerLog as *mut c_void,
        )
    };
    assert_eq!(status, 0);
}

#[test]
fn async_handler_gets_the_satisfying_value_and_stays_while_it_returns_true() {
    init();
    let s = signal(0);
    let log = handler_log(2);
    register_handler(s, HSA_SIGNAL_CONDITION_GTE, 10, log);
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        log.calls.lock().unwrap().is_empty(),
        "condition not yet met"
    );
    store(s, 17);
    let calls = wait_calls(log, 1);
    assert_eq!(calls[0].0, 17, "the value that satisfied the condition");
    assert_eq!(calls[0].1, "hsa-cpu-async", "runs on the async thread");
    // Returned true: still registered, fires again on the next match.
    store(s, 3);
    store(s, 12);
    let calls = wait_calls(log, 2);
    assert_eq!(calls.len(), 2);
    assert!(calls[1].0 >= 10, "second call saw {}", calls[1].0);
    // Returned false on the 2nd call: removed.
    store(s, 40);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(log.calls.lock().unwrap().len(), 2, "removed after false");
    // SAFETY: s is live.
    unsafe { rt::hsa_signal_destroy(s) };
}

#[test]
fn async_handlers_run_serially_on_one_thread() {
    init();
    let logs: Vec<&'static HandlerLog> = (0..4).map(|_| handler_log(1)).collect();
    let signals: Vec<hsa_signal_t> = (0..4).map(|_| signal(1)).collect();
    for (s, log) in signals.iter().zip(&logs) {
        register_handler(*s, HSA_SIGNAL_CONDITION_EQ, 0, log);
    }
    for s in &signals {
        store(*s, 0);
    }
    for log in &logs {
        let calls = wait_calls(log, 1);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0], (0, "hsa-cpu-async".to_string()));
    }
    // Each handler sleeps 5 ms while marked running: one at a time.
    assert!(
        !OVERLAPPED.load(std::sync::atomic::Ordering::SeqCst),
        "two handlers ran at once"
    );
    let names: std::collections::HashSet<String> = logs
        .iter()
        .map(|l| l.calls.lock().unwrap()[0].1.clone())
        .collect();
    assert_eq!(names.len(), 1, "one async thread");
    // SAFETY: invalid arguments are refused without calling anything.
    unsafe {
        assert_eq!(
            rt::hsa_amd_signal_async_handler(
                hsa_signal_t { handle: 12345 },
                HSA_SIGNAL_CONDITION_EQ,
                0,
                Some(log_handler),
                std::ptr::null_mut()
            ),
            HSA_STATUS_ERROR_INVALID_SIGNAL
        );
        assert_eq!(
            rt::hsa_amd_signal_async_handler(
                signals[0],
                HSA_SIGNAL_CONDITION_EQ,
                0,
                None,
                std::ptr::null_mut()
            ),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
        for s in signals {
            rt::hsa_signal_destroy(s);
        }
    }
}

/// Voluntary context switches (sleeps) of the runtime's async thread so far.
fn async_thread_sleeps() -> u64 {
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != "hsa-cpu-async" {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("voluntary_ctxt_switches:"))
            .expect("a voluntary_ctxt_switches line");
        return line.split_whitespace().nth(1).unwrap().parse().unwrap();
    }
    panic!("no hsa-cpu-async thread: the async handler registration did not start it");
}

#[test]
fn changes_of_unwatched_signals_leave_the_async_thread_asleep() {
    run_child("signals::child_scenario_unwatched_signal_changes", &[]);
}

#[test]
#[ignore = "child process of changes_of_unwatched_signals_leave_the_async_thread_asleep"]
fn child_scenario_unwatched_signal_changes() {
    init();
    let watched = signal(1);
    let log = handler_log(1);
    register_handler(watched, HSA_SIGNAL_CONDITION_EQ, 0, log);
    let unwatched = signal(0);
    std::thread::sleep(Duration::from_millis(20));
    let before = async_thread_sleeps();
    // Each store used to wake the async thread (every change notified the
    // process-wide wait_any condvar once any handler existed).
    for i in 0..200 {
        store(unwatched, i);
        std::thread::sleep(Duration::from_micros(200));
    }
    let woken = async_thread_sleeps() - before;
    assert!(
        woken < 20,
        "the async thread woke {woken} times for 200 stores to a signal no handler watches"
    );
    // The watched signal still wakes it, and its handler runs.
    store(watched, 0);
    assert_eq!(
        wait_calls(log, 1).len(),
        1,
        "the watched signal's handler ran"
    );
    // SAFETY: both signals are live.
    unsafe {
        rt::hsa_signal_destroy(watched);
        rt::hsa_signal_destroy(unwatched);
    }
}

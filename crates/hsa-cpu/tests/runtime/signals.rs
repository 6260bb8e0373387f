//! Signals: values, memory-order variants, blocking waits, wait_any.

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
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

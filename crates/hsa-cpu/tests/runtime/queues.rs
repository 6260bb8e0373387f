//! Queues and the packet processor: order, barriers, completion signals,
//! error callback, size rules, destroy while blocked (timestamps: profiling.rs).

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[test]
fn dispatches_run_in_submission_order() {
    let k = test_kernels();
    let record = kernel_object(k.executable, "record.kd");
    let q = queue(64);
    let mut log = RecordLog::new();
    let done = signal(1);
    let mut packets: Vec<AqlPacket> = (1..=40)
        .map(|id| dispatch(record, log.kernarg(id), 1, hsa_signal_t::default(), false))
        .collect();
    packets.push(barrier_and(&[], done));
    submit(q, &packets[..20]);
    submit(q, &packets[20..]);
    assert_eq!(wait_eq(done, 0), 0);
    assert_eq!(log.entries(), (1..=40).collect::<Vec<u32>>());
    // SAFETY: q is live; after processing, read index == write index.
    unsafe {
        assert_eq!(rt::hsa_queue_load_read_index_scacquire(q), 41);
        assert_eq!(rt::hsa_queue_load_write_index_relaxed(q), 41);
        assert_eq!(rt::hsa_queue_destroy(q), 0);
    }
}

#[test]
fn completion_signal_is_decremented_by_exactly_one() {
    let k = test_kernels();
    let record = kernel_object(k.executable, "record.kd");
    let q = queue(64);
    let mut log = RecordLog::new();
    let s = signal(5);
    submit(q, &[dispatch(record, log.kernarg(7), 1, s, true)]);
    assert_eq!(wait_eq(s, 4), 4);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(load(s), 4, "decremented once, not more");
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}

#[test]
fn barrier_and_holds_the_queue_until_another_thread_releases_its_dependencies() {
    let k = test_kernels();
    let record = kernel_object(k.executable, "record.kd");
    let q = queue(64);
    let mut log = RecordLog::new();
    let (hold_a, hold_b, done) = (signal(1), signal(1), signal(1));
    submit(
        q,
        &[
            dispatch(record, log.kernarg(1), 1, hsa_signal_t::default(), false),
            barrier_and(
                &[hold_a, hsa_signal_t::default(), hold_b],
                hsa_signal_t::default(),
            ),
            dispatch(record, log.kernarg(2), 1, done, true),
        ],
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        log.entries(),
        vec![1],
        "the packet after the barrier must not run yet"
    );
    std::thread::spawn(move || store(hold_a, 0)).join().unwrap();
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(log.entries(), vec![1], "one dependency is still held");
    std::thread::spawn(move || store(hold_b, 0)).join().unwrap();
    assert_eq!(wait_eq(done, 0), 0);
    assert_eq!(log.entries(), vec![1, 2]);
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}

#[test]
fn barrier_or_completes_when_any_dependency_reaches_zero() {
    init();
    let q = queue(64);
    let (a, b, done) = (signal(1), signal(1), signal(1));
    submit(q, &[barrier_or(&[a, b], done)]);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(load(done), 1);
    store(b, 0);
    assert_eq!(wait_eq(done, 0), 0);
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}

static ERRORS: AtomicU32 = AtomicU32::new(0);
static LAST_ERROR: AtomicU32 = AtomicU32::new(0);

unsafe extern "C" fn on_queue_error(status: hsa_status_t, _q: *mut hsa_queue_t, data: *mut c_void) {
    assert_eq!(data as usize, 0xfeed);
    LAST_ERROR.store(status, Ordering::SeqCst);
    ERRORS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn unknown_kernel_object_reports_invalid_code_object_and_still_completes() {
    init();
    let mut q = std::ptr::null_mut();
    // SAFETY: valid out pointer; the callback lives for the process.
    let s = unsafe {
        rt::hsa_queue_create(
            gpu(),
            64,
            HSA_QUEUE_TYPE_MULTI,
            Some(on_queue_error),
            0xfeed as *mut c_void,
            0,
            0,
            &mut q,
        )
    };
    assert_eq!(s, 0);
    let done = signal(1);
    let bogus = Box::new([0u8; 64]);
    submit(
        q,
        &[dispatch(
            bogus.as_ptr() as u64,
            std::ptr::null_mut(),
            1,
            done,
            false,
        )],
    );
    assert_eq!(
        wait_eq(done, 0),
        0,
        "the packet completes so waiters never hang"
    );
    assert_eq!(ERRORS.load(Ordering::SeqCst), 1);
    assert_eq!(
        LAST_ERROR.load(Ordering::SeqCst),
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT
    );
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}

#[test]
fn queue_sizes_follow_rocr_rules() {
    init();
    let mut q = std::ptr::null_mut();
    // SAFETY: valid out pointers throughout.
    unsafe {
        let create = |agent, size, q: &mut *mut hsa_queue_t| {
            rt::hsa_queue_create(
                agent,
                size,
                HSA_QUEUE_TYPE_MULTI,
                None,
                std::ptr::null_mut(),
                0,
                0,
                q,
            )
        };
        assert_eq!(
            create(gpu(), 100, &mut q),
            HSA_STATUS_ERROR_INVALID_ARGUMENT,
            "not a power of two"
        );
        assert_eq!(create(gpu(), 0, &mut q), HSA_STATUS_ERROR_INVALID_ARGUMENT);
        let info = |attribute| {
            let mut v = 0u32;
            assert_eq!(
                rt::hsa_agent_get_info(gpu(), attribute, &mut v as *mut u32 as *mut c_void),
                0
            );
            v
        };
        let (min, max) = (
            info(HSA_AGENT_INFO_QUEUE_MIN_SIZE),
            info(HSA_AGENT_INFO_QUEUE_MAX_SIZE),
        );
        assert_eq!((min, max), (4, 131072));
        assert_eq!(
            create(gpu(), max * 2, &mut q),
            HSA_STATUS_ERROR_OUT_OF_RESOURCES,
            "above the maximum, as ROCr"
        );
        assert_eq!(
            create(gpu(), min / 2, &mut q),
            HSA_STATUS_ERROR_INVALID_ARGUMENT,
            "below the minimum: refused, not rounded up (ROCr)"
        );
        assert_eq!(
            create(cpu(), 64, &mut q),
            HSA_STATUS_ERROR_INVALID_AGENT,
            "the CPU agent has no kernel dispatch"
        );
        assert_eq!(create(gpu(), 4, &mut q), 0);
        assert_eq!((*q).size, 4, "exactly the size requested, as ROCr");
        let ring = (*q).base_address as *const AqlPacket;
        assert_eq!(ring as usize % 64, 0);
        for i in 0..4 {
            assert_eq!(
                packet::packet_type((*ring.add(i)).header()),
                HSA_PACKET_TYPE_INVALID
            );
        }
        assert_eq!(rt::hsa_queue_destroy(q), 0);
        assert_eq!(rt::hsa_queue_destroy(q), HSA_STATUS_ERROR_INVALID_QUEUE);
    }
}

#[test]
fn write_index_operations_have_hsa_semantics() {
    init();
    let q = queue(64);
    // SAFETY: q is live.
    unsafe {
        assert_eq!(rt::hsa_queue_add_write_index_relaxed(q, 3), 0);
        assert_eq!(
            rt::hsa_queue_cas_write_index_scacq_screl(q, 2, 9),
            3,
            "failed CAS returns the observed value"
        );
        assert_eq!(rt::hsa_queue_cas_write_index_relaxed(q, 3, 5), 3);
        assert_eq!(rt::hsa_queue_load_write_index_scacquire(q), 5);
        rt::hsa_queue_store_write_index_screlease(q, 0);
        assert_eq!(rt::hsa_queue_load_write_index_relaxed(q), 0);
        rt::hsa_queue_destroy(q);
    }
}

#[test]
fn barrier_and_dependency_destroyed_while_waited_on_counts_as_satisfied() {
    let q = queue(64);
    let dep = signal(1);
    let done = signal(1);
    submit(q, &[barrier_and(&[dep], done)]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        load(done),
        1,
        "held while the dependency is live and non-zero"
    );
    // SAFETY: dep is a live signal.
    assert_eq!(unsafe { rt::hsa_signal_destroy(dep) }, 0);
    assert_eq!(wait_eq(done, 0), 0, "the barrier completed");
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}

#[test]
fn barrier_or_dependency_destroyed_while_waited_on_counts_as_satisfied() {
    let q = queue(64);
    let (a, b) = (signal(1), signal(1));
    let done = signal(1);
    submit(q, &[barrier_or(&[a, b], done)]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        load(done),
        1,
        "held while every dependency is live and non-zero"
    );
    // SAFETY: a is a live signal.
    assert_eq!(unsafe { rt::hsa_signal_destroy(a) }, 0);
    assert_eq!(wait_eq(done, 0), 0, "the barrier completed");
    assert_eq!(load(b), 1, "the other dependency is untouched");
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}

#[test]
fn destroy_wakes_a_processor_blocked_on_a_barrier_at_once() {
    // The processor sleeps on the dependency with no periodic wake-up; a
    // destroy must still end that sleep at once (it used to poll every 50 ms).
    let mut total = Duration::ZERO;
    for or in [false, true, false, true, false, true] {
        let q = queue(64);
        let dep = signal(1);
        let b = if or {
            barrier_or(&[dep], hsa_signal_t::default())
        } else {
            barrier_and(&[dep], hsa_signal_t::default())
        };
        submit(q, &[b]);
        std::thread::sleep(Duration::from_millis(10));
        let t = std::time::Instant::now();
        // SAFETY: q is live.
        assert_eq!(unsafe { rt::hsa_queue_destroy(q) }, 0);
        total += t.elapsed();
        assert_eq!(load(dep), 1, "the dependency was never satisfied");
        // SAFETY: dep is live.
        unsafe { rt::hsa_signal_destroy(dep) };
    }
    assert!(
        total < Duration::from_millis(60),
        "6 destroys of blocked queues took {total:?}"
    );
}

//! Profiling: hsa_amd_profiling_set_profiler_enabled and
//! hsa_amd_profiling_get_dispatch_time, from the timestamps written into the
//! completion signal the dispatch packet carries.

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
use std::ffi::c_void;

fn system_timestamp() -> u64 {
    let mut t = 0u64;
    // SAFETY: TIMESTAMP is a uint64_t.
    assert_eq!(
        unsafe {
            rt::hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP, &mut t as *mut u64 as *mut c_void)
        },
        0
    );
    t
}

fn dispatch_time(s: hsa_signal_t) -> (u64, u64) {
    let mut t = hsa_amd_profiling_dispatch_time_t::default();
    // SAFETY: valid out pointer.
    assert_eq!(
        unsafe { rt::hsa_amd_profiling_get_dispatch_time(gpu(), s, &mut t) },
        0
    );
    (t.start, t.end)
}

#[test]
fn dispatch_times_land_in_each_packets_completion_signal_in_the_system_timestamp_domain() {
    let k = test_kernels();
    let record = kernel_object(k.executable, "record.kd");
    let q = queue(64);
    // SAFETY: q is live.
    assert_eq!(
        unsafe { rt::hsa_amd_profiling_set_profiler_enabled(q, 1) },
        0
    );
    let mut log = RecordLog::new();
    let (first, second) = (signal(1), signal(1));
    let before = system_timestamp();
    submit(
        q,
        &[
            dispatch(record, log.kernarg(1), 1, first, true),
            dispatch(record, log.kernarg(2), 1, second, true),
        ],
    );
    assert_eq!(wait_eq(second, 0), 0);
    assert_eq!(wait_eq(first, 0), 0);
    let after = system_timestamp();
    let (s1, e1) = dispatch_time(first);
    let (s2, e2) = dispatch_time(second);
    assert!(before <= s1 && s1 <= e1, "first {s1}..{e1} after {before}");
    assert!(
        e1 <= s2,
        "in queue order: first ends {e1}, second starts {s2}"
    );
    assert!(s2 <= e2 && e2 <= after, "second {s2}..{e2} before {after}");
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}

#[test]
fn profiler_enable_validates_the_queue_and_times_are_recorded_regardless() {
    // Deliberate difference from ROCr (profiling.rs): times are written even
    // with profiling off, so ditto's tool can report durations.
    let k = test_kernels();
    let record = kernel_object(k.executable, "record.kd");
    let q = queue(64);
    let mut log = RecordLog::new();
    let s = signal(1);
    submit(q, &[dispatch(record, log.kernarg(1), 1, s, true)]);
    assert_eq!(wait_eq(s, 0), 0);
    let (start, end) = dispatch_time(s);
    assert!(start > 0 && start <= end, "{start}..{end}");
    // SAFETY: q is live, then destroyed; a bad queue is refused.
    unsafe {
        assert_eq!(rt::hsa_amd_profiling_set_profiler_enabled(q, 1), 0);
        assert_eq!(rt::hsa_amd_profiling_set_profiler_enabled(q, 0), 0);
        rt::hsa_queue_destroy(q);
        assert_eq!(
            rt::hsa_amd_profiling_set_profiler_enabled(q, 1),
            HSA_STATUS_ERROR_INVALID_QUEUE
        );
    }
}

#[test]
fn dispatch_times_are_read_only_through_the_gpu_agent_as_in_rocr() {
    let s = signal(0);
    let mut t = hsa_amd_profiling_dispatch_time_t::default();
    // SAFETY: valid out pointer; the handles are checked by the runtime.
    let mut status = |agent: hsa_agent_t, sig: hsa_signal_t| unsafe {
        rt::hsa_amd_profiling_get_dispatch_time(agent, sig, &mut t)
    };
    assert_eq!(status(gpu(), s), HSA_STATUS_SUCCESS);
    // No agent (a tool that passes 0), a CPU agent: no time.
    assert_eq!(
        status(hsa_agent_t { handle: 0 }, s),
        HSA_STATUS_ERROR_INVALID_AGENT
    );
    assert_eq!(status(cpu(), s), HSA_STATUS_ERROR_INVALID_AGENT);
    // The agent is checked before the signal, the device type after it.
    assert_eq!(
        status(hsa_agent_t { handle: 0 }, hsa_signal_t { handle: 0 }),
        HSA_STATUS_ERROR_INVALID_AGENT
    );
    assert_eq!(
        status(cpu(), hsa_signal_t { handle: 0 }),
        HSA_STATUS_ERROR_INVALID_SIGNAL
    );
    // SAFETY: a null time pointer, checked first.
    let null = unsafe { rt::hsa_amd_profiling_get_dispatch_time(gpu(), s, std::ptr::null_mut()) };
    assert_eq!(null, HSA_STATUS_ERROR_INVALID_ARGUMENT);
}

/// As the command processor does for every packet with a completion signal,
/// a barrier packet's signal gets times: from when the queue took it to
/// when its dependency was met (HIP 6.x times events by such markers).
#[test]
fn a_barrier_packet_is_timestamped_from_taken_to_satisfied() {
    init();
    let q = queue(64);
    let dep = signal(1);
    let done = signal(1);
    let before = system_timestamp();
    submit(q, &[barrier_and(&[dep], done)]);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let released = system_timestamp();
    store(dep, 0);
    assert_eq!(wait_eq(done, 0), 0);
    let after = system_timestamp();
    let (start, end) = dispatch_time(done);
    assert!(
        before <= start && start < released,
        "start {start} not in [{before}, {released})"
    );
    assert!(
        released <= end && end <= after,
        "end {end} not in [{released}, {after}]"
    );
    // SAFETY: q is live and idle.
    unsafe { rt::hsa_queue_destroy(q) };
}

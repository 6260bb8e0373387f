//! Many application threads dispatching the target at once on shared
//! queues (tests/apps/many_queues.cpp), captured end to end on the CPU
//! runtime: every dispatch captured exactly once with its own values, the
//! application unchanged. And target dispatches that overflow tiny queues,
//! so that the runtime calls ditto's packet callback later, on its async
//! thread (as ROCr does), all captured without a hang.

use crate::common::many_queues::*;

#[test]
fn eight_threads_on_four_queues_get_all_1600_dispatches_captured_each_with_its_own_values() {
    let dir = tempfile::tempdir().unwrap();
    let c = capture(dir.path(), &[], &[]);
    assert_every_dispatch_captured_once(&c, 8, 4, 50);
    let kernels = c.manifest["dispatched_kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 1, "{kernels:?}");
    assert_eq!(kernels[0]["count"], 1600);
}

#[test]
fn target_dispatches_overflowing_tiny_queues_are_intercepted_on_the_async_thread_and_all_captured()
{
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("hsa-cpu.trace");
    // Queues of 4 slots (the runtime's minimum), one kept free: a held
    // dispatch and its barrier fill a queue, so every next one overflows.
    let args = [
        "--queue-size",
        "4",
        "--threads",
        "4",
        "--queues",
        "2",
        "--per-queue",
        "10",
    ];
    let c = capture(dir.path(), &args, &[("DITTO_HSA_CPU_TRACE", &trace)]);
    assert_every_dispatch_captured_once(&c, 4, 2, 10);
    let trace = std::fs::read_to_string(&trace).expect("the CPU runtime's trace");
    let count = |event: &str| trace.lines().filter(|l| *l == event).count();
    assert!(
        count("overflow") > 0,
        "the rewritten packets overflowed the ring"
    );
    assert!(
        count("intercept-async") > 0,
        "ditto's callback ran on the runtime's async thread (not an application thread)"
    );
}

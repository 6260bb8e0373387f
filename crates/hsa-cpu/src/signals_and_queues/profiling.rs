//! Dispatch timestamps (`hsa_amd_profiling_*`): which queues record them
//! and how a tool reads them. The packet processor (`packet_processor`) writes the
//! start and end of every dispatch and barrier into its completion signal
//! (`Signal::set_dispatch_time`), in ticks of the system timestamp
//! (`agents::timestamp_ns`, 1 GHz); this module answers for them.
//!
//! Over `queues` and `signals`; owns no state.

use crate::signals_and_queues::{queues, signals};
use hsa::*;

/// Deliberate difference: ROCr's CP writes dispatch timestamps only on
/// queues with profiling enabled; we write them for every dispatch (the
/// ditto tool reports durations on the CPU runtime without enabling
/// profiling), so enabling only validates the queue.
pub(crate) fn set_profiler_enabled(queue: *mut hsa_queue_t, _enable: i32) -> hsa_status_t {
    if queues::lookup(queue).is_none() {
        return HSA_STATUS_ERROR_INVALID_QUEUE;
    }
    HSA_STATUS_SUCCESS
}

/// As ROCr (every release): the time pointer is checked first, then the
/// agent (an unknown handle is INVALID_AGENT), the signal, and last that
/// the agent is a GPU (a CPU agent is INVALID_AGENT too): a tool that
/// passes no agent gets no time.
///
/// # Safety
/// `time` is null or valid for writes of one dispatch time.
pub(crate) unsafe fn get_dispatch_time(
    agent: hsa_agent_t,
    signal: hsa_signal_t,
    time: *mut hsa_amd_profiling_dispatch_time_t,
) -> hsa_status_t {
    if time.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if !crate::agents::is_agent(agent) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    let Some(s) = signals::lookup(signal) else {
        return HSA_STATUS_ERROR_INVALID_SIGNAL;
    };
    if !crate::agents::is_gpu(agent) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    let (start, end) = s.dispatch_time();
    // SAFETY: non-null out pointer supplied by the caller.
    unsafe { time.write(hsa_amd_profiling_dispatch_time_t { start, end }) };
    HSA_STATUS_SUCCESS
}

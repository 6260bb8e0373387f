//! The held-barrier rewrite of one target dispatch, written in ONE writer
//! call. Without a completion signal of its own: the dispatch with `done`
//! as its signal, then a barrier-AND (barrier bit set) that waits on
//! `hold`. With one: the dispatch keeps it (so the kernel's own start and
//! end land in it, where CLR and profilers read a kernel's time), raised by
//! 1 so the kernel's completion cannot complete it; a barrier-AND with the
//! barrier bit whose signal `done` says the kernel completed; then the held
//! barrier. The worker's release takes the 1 back, so the application sees
//! its signal complete only once the kernel has and the capture let it go,
//! as it did when the held barrier carried it. With `--capture inputs` (or
//! `all`) two barrier-ANDs go first, in the same call: one with the barrier
//! bit whose completion signal `pre` says all earlier work has completed,
//! and one that waits on `hold_pre`, released by the worker once the inputs
//! are snapshotted. The kernarg bytes are copied now (the app may reuse
//! them), and a job goes to the worker BEFORE the rewrite is written: the
//! write is the last step, so a panic anywhere before it leaves the
//! original packet to be forwarded once, and after it nothing can lose the
//! job that releases the barrier.
//!
//! Owns the packets of the rewrite and the job it queues; takes its signals
//! from the tool's pool and never waits.

use super::{QueueContext, Writer};
use crate::capture::kernel_table::KernelInfo;
use crate::capture::replay::Segments;
use crate::hsa::worker::{HeldSignals, Job, PreHold, WorkerMessage};
use hsa::*;
use std::ffi::c_void;
use std::sync::Arc;

/// Queues the job, then writes [dispatch(done), barrier-AND(waits `hold`)],
/// or, when the dispatch has a signal of its own, [dispatch(app's signal,
/// raised by 1), barrier-AND(barrier bit → `done`), barrier-AND(waits
/// `hold`)], in one writer call; when inputs are captured, preceded by
/// [barrier-AND(barrier bit → `pre`), barrier-AND(waits `hold_pre`)]. Returns false, having written nothing, when
/// the dispatch cannot be held (no signals, unreadable kernarg); its index
/// is used up either way.
///
/// # Safety
/// `packet` is a kernel-dispatch packet whose kernarg_address points to at
/// least `kernel.kernarg_size` readable bytes, as the runtime requires.
pub(super) unsafe fn hold_dispatch(
    ctx: &QueueContext,
    packet: &AqlPacket,
    kernel: Arc<KernelInfo>,
    index: u64,
    write: Writer,
) -> bool {
    let tool = ctx.tool;
    let original = packet.as_dispatch();
    let size = kernel.kernarg_size as usize;
    let kernarg = if size == 0 {
        Vec::new()
    } else if original.kernarg_address.is_null() {
        return false;
    } else {
        // SAFETY: the dispatch's kernarg segment is `size` bytes (KERNARG_SEGMENT_SIZE)
        // and stays valid at least until the dispatch is submitted.
        unsafe { std::slice::from_raw_parts(original.kernarg_address as *const u8, size) }.to_vec()
    };
    let Some(mut held) = tool.take_pair() else {
        return false;
    };
    if kernel.is_taken_before(tool.options.capture, tool.options.interior_outputs_before) {
        let Some(pre) = tool.take_pair() else {
            // Unused, still at 1: back to the free list.
            tool.recycle(held);
            return false;
        };
        held.pre = Some(PreHold {
            pre: pre.done,
            hold_pre: pre.hold,
        });
    }

    // The application's completion signal stays on its dispatch, so the
    // command processor writes the KERNEL's start and end into it (CLR and
    // profilers read a kernel's time there); it is raised by 1 so that the
    // kernel's completion does not complete it, and the worker's release
    // takes the 1 back. Our `done` goes on a barrier right after it.
    // Raising and lowering need both entries; without them the signal moves
    // to the held barrier (the kernel's times are then the barrier's).
    let app = original.completion_signal.handle;
    let raise = tool
        .core
        .hsa_signal_add_screlease_fn
        .filter(|_| app != 0 && tool.core.hsa_signal_subtract_screlease_fn.is_some());
    let app_kept = raise.is_some();
    if app_kept {
        held.app = app;
    }
    let mut dispatch = original;
    if !app_kept {
        dispatch.completion_signal = hsa_signal_t { handle: held.done };
    }
    // HIP releases a kernel at AGENT scope and makes it visible to the host
    // with a later SYSTEM-scope barrier, which the held barrier keeps from
    // running: when `done` fires, the outputs could still sit in the GPU's
    // L2, unseen by an SDMA copy or a CPU read. The kernel's own release
    // is raised to SYSTEM so they are visible by then.
    if tool.options.raise_release_scope {
        dispatch.header = with_system_release(original.header);
    }
    // Completes (done → 0) once the kernel has: the barrier bit.
    let ended = hsa_barrier_and_packet_t {
        header: header(HSA_PACKET_TYPE_BARRIER_AND, true),
        completion_signal: hsa_signal_t { handle: held.done },
        ..Default::default()
    };
    let mut barrier = hsa_barrier_and_packet_t {
        header: header(HSA_PACKET_TYPE_BARRIER_AND, true),
        completion_signal: if app_kept {
            hsa_signal_t::default()
        } else {
            original.completion_signal
        },
        ..Default::default()
    };
    barrier.dep_signal[0] = hsa_signal_t { handle: held.hold };
    let mut rewritten = [AqlPacket::from_barrier(&barrier); 5];
    let mut count = 0;
    let mut push = |p: AqlPacket| {
        rewritten[count] = p;
        count += 1;
    };
    if let Some(pre) = held.pre {
        // Completes (pre → 0) once everything before it has completed.
        let drained = hsa_barrier_and_packet_t {
            header: header(HSA_PACKET_TYPE_BARRIER_AND, true),
            completion_signal: hsa_signal_t { handle: pre.pre },
            ..Default::default()
        };
        // Keeps the kernel from starting until the inputs are taken.
        let mut gate = hsa_barrier_and_packet_t {
            header: header(HSA_PACKET_TYPE_BARRIER_AND, true),
            ..Default::default()
        };
        gate.dep_signal[0] = hsa_signal_t {
            handle: pre.hold_pre,
        };
        push(AqlPacket::from_barrier(&drained));
        push(AqlPacket::from_barrier(&gate));
    }
    push(AqlPacket::from_dispatch(&dispatch));
    if app_kept {
        push(AqlPacket::from_barrier(&ended));
    }
    push(AqlPacket::from_barrier(&barrier));
    let job = Job {
        index,
        kernel,
        grid: [
            original.grid_size_x,
            original.grid_size_y,
            original.grid_size_z,
        ],
        block: [
            original.workgroup_size_x as u32,
            original.workgroup_size_y as u32,
            original.workgroup_size_z as u32,
        ],
        kernarg,
        segments: Segments {
            group: original.group_segment_size,
            private: original.private_segment_size,
        },
        held,
        queue: ctx.queue,
        agent: ctx.agent,
    };
    if let Some(add) = raise {
        // Before the job is queued: a worker already gone releases it at
        // once, taking the 1 back. SAFETY: the application's signal, which
        // it keeps alive until its dispatch completes.
        unsafe { add(hsa_signal_t { handle: app }, 1) };
    }
    tool.submit(WorkerMessage::Job(job));
    // SAFETY: `count` contiguous packets on our stack, valid for the call.
    unsafe { write(rewritten.as_ptr() as *const c_void, count as u64) };
    true
}

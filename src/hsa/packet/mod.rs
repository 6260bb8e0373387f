//! The intercept queue's packet callback: the only code that runs on the
//! application's submitting thread while it holds the queue lock. It never
//! waits. A non-target packet costs a header check and, for dispatches, a
//! lock-free kernel lookup (the kernel table's per-thread cache: two loads
//! while the table is unchanged) and a counter increment: no lock, no
//! allocation (pinned by tests/packet_path_allocations.rs), no `Arc`
//! clone; it reaches the writer byte for byte, with no signal.
//!
//! Owns the walk over a call's packets: runs of non-target packets are
//! forwarded as they are, and each target dispatch goes to `rewrite` (the
//! held-barrier rewrite, written in ONE writer call). Every matched
//! dispatch takes the next dispatch index, held or not (also once capture
//! has failed open), so a dispatch that passes uncaptured leaves a gap
//! instead of shifting the indices of the later ones onto the wrong
//! dispatches, and the worker can account for every index at the end. A
//! dispatch that `--dispatch` (DITTO_DISPATCH) does not select, or that
//! comes after capture stopped, is forwarded exactly like a non-target
//! packet: in place, untouched, no signal, no job. One that cannot be held
//! (no argument layout, no signals, no kernarg) is reported to the worker
//! as missed.

mod rewrite;
#[cfg(test)]
mod tests;

use super::tool::HsaTool;
use super::worker::WorkerMessage;
use crate::capture::kernel_table::KernelInfo;
use crate::guard::ffi_guard;
use hsa::*;
use rewrite::hold_dispatch;
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::Arc;

pub(crate) type Writer = unsafe extern "C" fn(pkts: *const c_void, pkt_count: u64);

/// Per-queue data handed to the packet callback (its `data`), kept by
/// `queues` while the queue lives.
pub struct QueueContext {
    pub tool: &'static HsaTool,
    /// Identity of the queue (its address), for signal recycling.
    pub queue: u64,
    /// The agent the queue was created on: dispatch times are read
    /// through it.
    pub agent: u64,
}

/// `hsa_amd_queue_intercept_handler` registered on every queue; `data` is
/// the queue's [`QueueContext`].
///
/// # Safety
/// Called by the runtime: `pkts` points to `count` packets, `data` is a
/// `QueueContext` that outlives the queue, `writer` is valid until return.
pub unsafe extern "C" fn on_packets(
    pkts: *const c_void,
    count: u64,
    _user_pkt_index: u64,
    data: *mut c_void,
    writer: InterceptPacketWriter,
) {
    let Some(write) = writer else { return };
    if data.is_null() {
        // SAFETY: forwarding the runtime's own packets to its own writer.
        unsafe { write(pkts, count) };
        return;
    }
    // SAFETY: `data` is the queue's QueueContext, kept until it is destroyed.
    let ctx = unsafe { &*(data as *const QueueContext) };
    let forwarded = Cell::new(0u64);
    ffi_guard(
        "the packet callback",
        // SAFETY: the runtime's contract above.
        || unsafe { intercept(ctx, pkts as *const AqlPacket, count, write, &forwarded) },
        // SAFETY: forwards, untouched, the packets not yet written.
        || unsafe {
            let done = forwarded.get();
            if done < count {
                write(
                    (pkts as *const AqlPacket).add(done as usize) as *const c_void,
                    count - done,
                );
            }
        },
    );
}

/// Forwards runs of non-target packets as they are and rewrites each
/// target dispatch. `forwarded` counts the input packets already written,
/// so a panic can forward the rest and nothing twice.
///
/// # Safety
/// `pkts` points to `count` packets; `write` is the runtime's writer.
pub(crate) unsafe fn intercept(
    ctx: &QueueContext,
    pkts: *const AqlPacket,
    count: u64,
    write: Writer,
    forwarded: &Cell<u64>,
) {
    let tool = ctx.tool;
    let mut run_start = 0u64;
    for i in 0..count {
        // SAFETY: i < count.
        let packet = unsafe { &*pkts.add(i as usize) };
        let Some(kernel) = target_of(tool, packet) else {
            continue;
        };
        // Every matched dispatch takes its index, selected or not, so the
        // manifest keeps the real indices.
        let index = tool.next_dispatch_index();
        if !tool.options.dispatch.selects(index) || !tool.lifecycle.is_capturing() {
            // Not selected, or capture stopped: passes like a non-target
            // packet (with the run that follows it), no signal, no job, no
            // hold; the worker accounts for it at the end.
            continue;
        }
        if kernel.signature.is_none() {
            tool.submit(WorkerMessage::Missed {
                index,
                reason: ditto_protocol::MissReason::Error,
                detail: kernel.why_not.clone().unwrap_or_else(|| {
                    format!(
                        "no argument layout for `{}` (--arg-types gives one)",
                        kernel.name.demangled
                    )
                }),
            });
            continue;
        }
        if i > run_start {
            // SAFETY: packets run_start..i are the caller's, untouched.
            unsafe { write(pkts.add(run_start as usize) as *const c_void, i - run_start) };
            forwarded.set(i);
        }
        // SAFETY: `packet` is a live dispatch packet of this call.
        if !unsafe { hold_dispatch(ctx, packet, kernel, index, write) } {
            // SAFETY: as above; forwarded unchanged when it cannot be held.
            unsafe { write(packet as *const AqlPacket as *const c_void, 1) };
            tool.submit(WorkerMessage::Missed {
                index,
                reason: ditto_protocol::MissReason::Error,
                detail: "the dispatch could not be held (the runtime created no signal, or its \
                         kernel arguments were unreadable); it ran uncaptured"
                    .to_string(),
            });
        }
        forwarded.set(i + 1);
        run_start = i + 1;
    }
    if count > run_start {
        // SAFETY: the rest of the caller's packets, untouched.
        unsafe {
            write(
                pkts.add(run_start as usize) as *const c_void,
                count - run_start,
            )
        };
    }
    forwarded.set(count);
}

/// The kernel of a dispatch packet, counted, if the query matches it. The
/// whole cost for any other packet.
fn target_of(tool: &HsaTool, packet: &AqlPacket) -> Option<Arc<KernelInfo>> {
    if packet_type(packet.header()) != HSA_PACKET_TYPE_KERNEL_DISPATCH {
        return None;
    }
    let kernel_object = u64::from_le_bytes(packet.0[32..40].try_into().ok()?);
    let kernel = tool.kernels.lookup(kernel_object)?;
    kernel.count_dispatch();
    kernel.is_target.then(|| kernel.to_arc())
}

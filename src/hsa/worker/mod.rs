//! The held-queue worker: the HSA backend's thread for everything about a
//! held dispatch that may block.
//! It waits for the dispatch to complete, resolves and exports its output
//! buffers, sends one Dispatch to the collector, waits for the Ack and only
//! then releases the held barrier. When inputs are captured it first waits
//! for the `pre` barrier (all earlier work in the queue done), sends the
//! inputs as a Dispatch of `Before` buffers, and on its Ack releases
//! `hold_pre` so that the kernel starts. Owns the collector connection; the
//! runtime is reached through [`HeldSignals`] (the hold) and
//! [`BufferAccess`] (the buffers), capture's state through the process's
//! [`Lifecycle`]. It never runs on an application thread.
//!
//! Recycling the held barrier's signals: `done` and `hold` may be reused
//! only once the queue's packet processor is past the barrier that waits
//! on `hold`. Nothing reports that directly, so the worker keeps, per
//! queue, the pair of the last released job; when a LATER job on the same
//! queue has completed (`done` reached 0), the earlier barrier, which
//! carries the barrier bit and precedes it, must have completed too, and
//! the earlier pair goes back to the free list. At most one pair per queue
//! stays out at exit (left to the runtime's teardown). Pairs released
//! without seeing their dispatch complete (fail-open, shutdown) are never
//! reused. Nothing of a destroyed queue is processed any more, so when the
//! application destroys a queue its last pair goes back to the free list
//! and its entry is dropped.
//!
//! A panic while handling one job is caught: the job is released, capture
//! fails open, and the worker goes on releasing whatever comes next, so no
//! held barrier is ever left behind.
//!
//! Accounting ([`crate::capture::accounting`]): every matched dispatch ends up reported to
//! the collector, as a Dispatch or as a Missed with its reason. A timed-out
//! Ack leaves the connection's frames intact, so the Missed of that dispatch
//! (and, at shutdown, of every later one, with the Goodbye) is still sent;
//! after a failed write nothing more is.

#[cfg(test)]
mod tests;

use crate::capture::accounting::{Ledger, fail_on, say_goodbye, send_queued};
use crate::capture::client::{ClientError, CollectorConnection};
use crate::capture::kernel_table::KernelInfo;
use crate::capture::replay::{ReplayPart, Segments, describe_replay};
use crate::capture::{ArgumentChoice, BufferAccess, DispatchFacts, Snapshot, describe};
use crate::guard::caught;
use crate::lifecycle::Lifecycle;
use crate::log::{log_debug, log_info, log_warn};
use crossbeam_channel::{Receiver, Sender};
use ditto_protocol::{DispatchSelection, Goodbye, Hello, MissReason, Phase, Replay};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The two signals that hold one target dispatch: `done` (ours: reaches 0
/// once the kernel has completed) and `hold` (the barrier's dependency,
/// released by the worker), plus, when inputs are captured, the two that
/// hold it BEFORE it runs. Runtime handles, opaque here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldBarrier {
    pub done: u64,
    pub hold: u64,
    pub pre: Option<PreHold>,
    /// The application's own completion signal, left on its dispatch (so
    /// the kernel's times land in it) and raised by 1 while the dispatch is
    /// held; the release takes that 1 back. 0: the dispatch had none.
    pub app: u64,
}

/// `pre`: completion signal of a barrier (barrier bit) placed before the
/// dispatch, reaching 0 once all earlier work in the queue completed;
/// `hold_pre`: dependency of the barrier right after it, which keeps the
/// kernel from starting until the inputs are snapshotted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreHold {
    pub pre: u64,
    pub hold_pre: u64,
}

/// One held target dispatch, built by the packet callback.
#[derive(Debug)]
pub struct Job {
    /// Index among this process's target dispatches, from 0.
    pub index: u64,
    pub kernel: Arc<KernelInfo>,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Kernarg bytes copied at submission.
    pub kernarg: Vec<u8>,
    /// The packet's group and private segment sizes.
    pub segments: Segments,
    pub held: HeldBarrier,
    /// Identity of the queue the dispatch went to.
    pub queue: u64,
    /// The agent of that queue.
    pub agent: u64,
}

impl Job {
    /// The dispatch's facts for the describe step; `duration_ns` read from
    /// the runtime once the kernel ran.
    fn facts(&self, duration_ns: Option<u64>) -> DispatchFacts<'_> {
        DispatchFacts {
            index: self.index,
            kernel: &self.kernel,
            kernarg: &self.kernarg,
            grid: self.grid,
            block: self.block,
            duration_ns,
        }
    }
}

pub enum WorkerMessage {
    Job(Job),
    /// A matched dispatch that passed uncaptured (it could not be held).
    Missed {
        index: u64,
        reason: MissReason,
        detail: String,
    },
    /// The application destroyed this queue: its last pair is recycled and
    /// the queue forgotten.
    QueueDestroyed {
        queue: u64,
    },
    /// Finish the jobs before this message, account for every one of the
    /// goodbye's `matched` dispatch indices, say Goodbye, acknowledge, stop.
    Shutdown {
        goodbye: Goodbye,
        finished: Sender<()>,
    },
}

/// The hold as the worker drives it: HSA signals, opaque handles here.
pub trait HeldSignals {
    /// Waits at most `timeout` for one of our signals (`done` or `pre`) to
    /// reach 0.
    fn wait_zero(&self, signal: u64, timeout: Duration) -> bool;
    /// Lets the held barriers (`hold_pre` first, then `hold`), and
    /// everything behind them, run.
    fn release(&self, held: &HeldBarrier);
    /// Lets the kernel start once its inputs are snapshotted (`hold_pre`).
    fn release_pre(&self, pre: &PreHold);
    /// Returns a pair whose barrier is known to be consumed to the free list.
    fn recycle(&self, held: HeldBarrier);
    /// Execution time of the completed dispatch whose completion signal is
    /// `held.done`, on a queue of `agent`, in nanoseconds; `None` when the
    /// runtime reports none.
    fn dispatch_duration_ns(&self, held: &HeldBarrier, agent: u64) -> Option<u64>;
}

pub struct WorkerConfig {
    pub socket: Option<PathBuf>,
    pub hello: Hello,
    pub timeout: Duration,
    /// Which arguments are captured, before and after the kernel, and
    /// the extents `--arg-sizes` gives.
    pub choice: ArgumentChoice,
    /// Which dispatch indices `--dispatch` chose (the others are accounted
    /// as missed by selection).
    pub dispatch: DispatchSelection,
    /// Size of the connection's staging file (`DITTO_STAGING_MIB`; 0: none).
    pub staging_bytes: u64,
    /// The uid the collector must run as (`Options::collector_uid`).
    pub collector_uid: u32,
}

/// A held job and whether its inputs are still to be snapshotted.
struct Pending {
    job: Job,
    inputs_pending: bool,
}

impl Pending {
    /// The signal this job waits on next: `pre`, then `done`.
    fn next_signal(&self) -> u64 {
        match (self.inputs_pending, self.job.held.pre) {
            (true, Some(p)) => p.pre,
            _ => self.job.held.done,
        }
    }
}

/// How long one wait on `done` lasts when one dispatch is held: the lifecycle
/// and newly arrived jobs are looked at again after it.
const WAIT_SLICE: Duration = Duration::from_millis(100);
/// The same when several are held: each is looked at in turn.
const SHORT_WAIT_SLICE: Duration = Duration::from_millis(1);
/// How often frames waiting for room in the socket are retried while the
/// worker has nothing else to do.
const OUTBOX_RETRY: Duration = Duration::from_millis(1);
/// A wait for a held dispatch longer than this first sends the frames
/// waiting in the outbox.
const BRIEF_WAIT: Duration = Duration::from_micros(200);

/// Runs until a Shutdown message (or the channel closes).
///
/// Held dispatches are handled in the order they COMPLETE, not the order
/// they were submitted: through the application's own dependencies (a
/// barrier on one queue waiting for a signal completed on another), a
/// dispatch may need work that sits behind a later job's held barrier, and
/// waiting for it first would hang the application. Indices were given at
/// submission, so snapshots keep their order whatever the capture order.
pub fn run<D: HeldSignals + BufferAccess>(
    device: &D,
    jobs: Receiver<WorkerMessage>,
    config: WorkerConfig,
    lifecycle: &Lifecycle,
) {
    let mut connection = match &config.socket {
        None => {
            lifecycle.fail("DITTO_SOCKET is not set");
            None
        }
        Some(socket) => match CollectorConnection::open(
            socket,
            &config.hello,
            config.timeout,
            config.staging_bytes,
            config.collector_uid,
        ) {
            Ok(c) => {
                log_info!("connected to the collector at {}", socket.display());
                Some(c)
            }
            Err(e) => {
                lifecycle.fail(&e.to_string());
                None
            }
        },
    };
    let mut last_pair_of_queue: HashMap<u64, HeldBarrier> = HashMap::new();
    // Held, not yet completed, in submission order.
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut shutdown: Option<(Goodbye, Sender<()>)> = None;
    let mut ledger = Ledger::default();
    loop {
        // Take what has arrived; block only when nothing is held (and,
        // while frames of released dispatches wait for room in the socket,
        // only a little at a time, sending what goes in between).
        let message = if pending.is_empty() && shutdown.is_none() {
            send_unsent(&mut connection, lifecycle);
            let unsent = connection.as_ref().is_some_and(|c| c.has_unsent());
            if unsent {
                match jobs.recv_timeout(OUTBOX_RETRY) {
                    Ok(m) => Some(m),
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
                }
            } else {
                match jobs.recv() {
                    Ok(m) => Some(m),
                    Err(_) => return,
                }
            }
        } else {
            jobs.try_recv().ok()
        };
        match message {
            Some(WorkerMessage::Job(job)) if shutdown.is_none() => {
                let inputs_pending = job.held.pre.is_some();
                pending.push_back(Pending {
                    job,
                    inputs_pending,
                });
                continue;
            }
            // Queued after the Shutdown (none expected): released at once.
            Some(WorkerMessage::Job(late)) => {
                device.release(&late.held);
                continue;
            }
            Some(WorkerMessage::QueueDestroyed { queue }) => {
                // Nothing of a destroyed queue is processed any more (a
                // packet not processed by then is left undefined, as
                // hsa_queue_destroy says): no packet refers to its last pair.
                if let Some(pair) = last_pair_of_queue.remove(&queue) {
                    device.recycle(pair);
                }
                continue;
            }
            Some(WorkerMessage::Missed {
                index,
                reason,
                detail,
            }) => {
                ledger.missed(index, reason, detail);
                continue;
            }
            Some(WorkerMessage::Shutdown { goodbye, finished }) => {
                shutdown = Some((goodbye, finished));
                continue;
            }
            None => {}
        }
        if pending.is_empty() {
            // Everything asked before the Shutdown is done: say goodbye, stop.
            if let Some((goodbye, finished)) = shutdown.take() {
                // After a timeout the connection's frames are intact: the
                // collector, if it comes back, still learns what was missed.
                ledger.close(goodbye.matched, &config.dispatch);
                say_goodbye(&mut connection, &mut ledger, lifecycle, &goodbye);
                lifecycle.finished();
                for late in jobs.try_iter() {
                    if let WorkerMessage::Job(job) = late {
                        device.release(&job.held);
                    }
                }
                let _ = finished.send(());
                return;
            }
            continue;
        }
        if !lifecycle.is_capturing() {
            // Capture is off (a failure, or the shutdown bound): release
            // everything held, completed or not; such pairs are never reused.
            for p in pending.drain(..) {
                device.release(&p.job.held);
            }
            continue;
        }
        let completed = first_completed(device, &pending);
        let Some(at) = completed else {
            let slice = if pending.len() == 1 {
                WAIT_SLICE
            } else {
                SHORT_WAIT_SLICE
            };
            // The oldest is the likeliest to finish first; the result is
            // looked at again on the next round. Frames of released
            // dispatches go out in batches, but not later than when the
            // wait turns out to be more than brief.
            let next = pending[0].next_signal();
            if !device.wait_zero(next, BRIEF_WAIT) {
                send_unsent(&mut connection, lifecycle);
                device.wait_zero(next, slice);
            }
            continue;
        };
        if pending[at].inputs_pending {
            // All earlier work is done and the kernel has not started.
            let held = pending[at].job.held;
            let index = pending[at].job.index;
            let taken = caught(|| {
                take_inputs(
                    device,
                    &pending[at].job,
                    &mut connection,
                    lifecycle,
                    &config,
                    &mut ledger,
                )
            });
            match taken {
                Ok(()) => pending[at].inputs_pending = false,
                Err(panic) => {
                    let reason = format!(
                        "internal error while snapshotting the inputs of a held dispatch: {panic}"
                    );
                    ledger.failed(index, MissReason::Error, &reason, RELEASED);
                    lifecycle.fail(&reason);
                    pending.remove(at);
                    device.release(&held);
                }
            }
            continue;
        }
        let job = pending.remove(at).expect("position is within pending").job;
        let held = job.held;
        let index = job.index;
        let mut released = false;
        let handled = caught(|| {
            handle_completed(
                device,
                job,
                &mut connection,
                lifecycle,
                &mut last_pair_of_queue,
                &config,
                &mut ledger,
                &mut released,
            )
        });
        if let Err(panic) = handled {
            let reason = format!("internal error while handling a held dispatch: {panic}");
            ledger.failed(index, MissReason::Error, &reason, RELEASED);
            lifecycle.fail(&reason);
            // Its state is unknown: released (once: the release gives the
            // application's signal its 1 back), never recycled.
            if !released {
                device.release(&held);
            }
        }
    }
}

/// The first held job, in submission order, whose next signal reached 0.
/// Only the oldest job of each queue is looked at: its held barrier keeps
/// every later packet of that queue from running, so no later job there can
/// complete first. One check per queue, not per held job: a queue holding
/// a thousand dispatches costs one signal check per round, not a thousand.
fn first_completed<D: HeldSignals>(device: &D, pending: &VecDeque<Pending>) -> Option<usize> {
    let mut queues_seen: Vec<u64> = Vec::new();
    for (at, p) in pending.iter().enumerate() {
        if queues_seen.contains(&p.job.queue) {
            continue;
        }
        if device.wait_zero(p.next_signal(), Duration::ZERO) {
            return Some(at);
        }
        queues_seen.push(p.job.queue);
    }
    None
}

/// Snapshots the inputs of a held dispatch whose `pre` barrier completed
/// (everything before it in the queue has run, the kernel has not), then
/// lets the kernel start: at once when its inputs are copies (staged or
/// shared memory), after the collector's Ack when it reads them through IPC.
/// Nothing is sent when no argument is selected.
fn take_inputs<D: HeldSignals + BufferAccess>(
    device: &D,
    job: &Job,
    connection: &mut Option<CollectorConnection>,
    lifecycle: &Lifecycle,
    config: &WorkerConfig,
    ledger: &mut Ledger,
) {
    let release = || {
        if let Some(pre) = &job.held.pre {
            device.release_pre(pre);
        }
    };
    let mut released = false;
    if lifecycle.is_capturing() && connection.is_some() {
        let facts = job.facts(None);
        let staging = connection.as_mut().and_then(|c| c.staging());
        let Snapshot {
            dispatch: mut before,
            mut copies,
            misses,
            ..
        } = describe(device, &facts, Phase::Before, &config.choice, staging);
        for (arg, detail) in misses {
            ledger.missed_buffer(job.index, arg, Phase::Before, detail);
        }
        let capture = &config.choice.capture;
        if capture.replays() {
            let staging = connection.as_mut().and_then(|c| c.staging());
            let ReplayPart {
                buffers,
                copies: image_copies,
                launch,
                misses,
            } = describe_replay(
                device,
                &facts,
                job.kernel.code.as_deref(),
                job.segments,
                capture.replay == Replay::AllAllocations,
                staging,
                copies.len(),
            );
            for (arg, detail) in misses {
                ledger.missed_buffer(job.index, arg, Phase::Replay, detail);
            }
            before.buffers.extend(buffers);
            copies.extend(image_copies);
            before.launch = Some(launch);
            // The code object goes first, once per connection.
            let code = job
                .kernel
                .code
                .as_ref()
                .and_then(|c| c.code_object.as_ref().ok());
            if let (Some(conn), Some(code)) = (connection.as_mut(), code)
                && let Err(e) = conn.code_object(code)
            {
                fail_on(connection, ledger, lifecycle, job.index, e, RELEASED);
            }
        }
        send_queued(connection, ledger, lifecycle);
        if let Some(conn) = connection.as_mut().filter(|_| lifecycle.is_capturing())
            && (!before.buffers.is_empty() || before.launch.is_some())
        {
            if !before.needs_ack() {
                release();
                released = true;
            }
            let result = conn.dispatch(before, copies);
            match result {
                Ok(Ok(())) => log_debug!(
                    "inputs of dispatch {} of `{}` captured",
                    job.index,
                    job.kernel.name.demangled
                ),
                Ok(Err(reason)) => log_warn!(
                    "collector could not capture the inputs of dispatch {} of `{}`: {reason}",
                    job.index,
                    job.kernel.name.demangled
                ),
                Err(e) => fail_on(connection, ledger, lifecycle, job.index, e, RELEASED),
            }
        }
    }
    if !released {
        release();
    }
}

/// Captures a held dispatch that has completed and releases it: at once
/// when its buffers are copies (staged or shared memory), after the
/// collector's Ack when it reads them through IPC. `released` is set the
/// moment it is released, so a panic after that does not release it again.
#[allow(clippy::too_many_arguments)]
fn handle_completed<D: HeldSignals + BufferAccess>(
    device: &D,
    job: Job,
    connection: &mut Option<CollectorConnection>,
    lifecycle: &Lifecycle,
    last_pair_of_queue: &mut HashMap<u64, HeldBarrier>,
    config: &WorkerConfig,
    ledger: &mut Ledger,
    released: &mut bool,
) {
    // This job's dispatch ran after the previous barrier on its queue.
    if let Some(previous) = last_pair_of_queue.remove(&job.queue) {
        device.recycle(previous);
    }
    if lifecycle.is_capturing() && connection.is_some() {
        let staging = connection.as_mut().and_then(|c| c.staging());
        let duration_ns = device.dispatch_duration_ns(&job.held, job.agent);
        let Snapshot {
            dispatch,
            copies,
            misses,
            interior_outputs,
        } = describe(
            device,
            &job.facts(duration_ns),
            Phase::After,
            &config.choice,
            staging,
        );
        job.kernel.learn_outputs(interior_outputs);
        for (arg, detail) in misses {
            ledger.missed_buffer(job.index, arg, Phase::After, detail);
        }
        send_queued(connection, ledger, lifecycle);
        let result = match connection.as_mut().filter(|_| lifecycle.is_capturing()) {
            Some(conn) => {
                if !dispatch.needs_ack() {
                    device.release(&job.held);
                    *released = true;
                }
                conn.dispatch(dispatch, copies)
            }
            None => Err(ClientError::Protocol(
                "the connection failed while reporting what was missed".into(),
            )),
        };
        if result.is_ok() {
            // Sent, and answered or to be answered in order: the collector
            // stores it or records why not.
            ledger.sent(job.index);
        }
        match result {
            Ok(Ok(())) => log_debug!(
                "dispatch {} of `{}` captured",
                job.index,
                job.kernel.name.demangled
            ),
            Ok(Err(reason)) => log_warn!(
                "collector could not capture dispatch {} of `{}`: {reason}",
                job.index,
                job.kernel.name.demangled
            ),
            Err(e) => fail_on(connection, ledger, lifecycle, job.index, e, RELEASED),
        }
    }
    if !*released {
        device.release(&job.held);
        *released = true;
    }
    last_pair_of_queue.insert(job.queue, job.held);
}

/// What happened to a held dispatch that was not captured.
const RELEASED: &str = "the dispatch was released uncaptured";

/// Sends what the socket takes now of the frames waiting in the outbox; a
/// failed write fails open.
fn send_unsent(connection: &mut Option<CollectorConnection>, lifecycle: &Lifecycle) {
    if let Some(conn) = connection.as_mut().filter(|c| c.has_unsent())
        && let Err(e) = conn.flush(false)
    {
        lifecycle.fail(&e.to_string());
    }
}

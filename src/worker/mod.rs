//! The worker thread: everything about a held dispatch that may block.
//! It waits for the dispatch to complete, resolves and exports its output
//! buffers, sends one Dispatch to the collector, waits for the Ack and only
//! then releases the held barrier. When inputs are captured it first waits
//! for the `pre` barrier (all earlier work in the queue done), sends the
//! inputs as a Dispatch of `Before` buffers, and on its Ack releases
//! `hold_pre` so that the kernel starts. Owns the collector connection and the
//! fail-open switch. Backend-neutral: the runtime is reached through
//! [`Device`]. It never runs on an application thread.
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
//! reused.
//!
//! A panic while handling one job is caught: the job is released, capture
//! fails open, and the worker goes on releasing whatever comes next, so no
//! held barrier is ever left behind.
//!
//! Accounting ([`accounting`]): every matched dispatch ends up reported to
//! the collector, as a Dispatch or as a Missed with its reason. A timed-out
//! Ack leaves the connection's frames intact, so the Missed of that dispatch
//! (and, at shutdown, of every later one, with the Goodbye) is still sent;
//! after a failed write nothing more is.

mod accounting;
mod describe;
#[cfg(test)]
mod tests;

pub use describe::describe;

use crate::allocation_map::Allocation;
use crate::client::{ClientError, CollectorConnection};
use crate::guard::panic_message;
use crate::kernel_table::KernelInfo;
use crate::log::{log_debug, log_info, log_warn};
use crate::staging::StagingFile;
use accounting::Ledger;
use crossbeam_channel::{Receiver, Sender};
use ditto_kernels::ArgSizes;
use ditto_protocol::{CaptureSet, DispatchSelection, Goodbye, Hello, MissReason, Phase};
use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The two signals that hold one target dispatch: `done` (the dispatch's
/// completion signal, ours) and `hold` (the barrier's dependency, released
/// by the worker), plus, when inputs are captured, the two that hold it
/// BEFORE it runs. Runtime handles, opaque here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldBarrier {
    pub done: u64,
    pub hold: u64,
    pub pre: Option<PreHold>,
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
    pub held: HeldBarrier,
    /// Identity of the queue the dispatch went to.
    pub queue: u64,
}

pub enum WorkerMessage {
    Job(Job),
    /// A matched dispatch that passed uncaptured (it could not be held).
    Missed {
        index: u64,
        reason: MissReason,
        detail: String,
    },
    /// Finish the jobs before this message, account for every one of the
    /// `matched` dispatch indices, say Goodbye, acknowledge, stop.
    Shutdown {
        goodbye: Goodbye,
        matched: u64,
        finished: Sender<()>,
    },
}

/// What the worker needs from the runtime.
pub trait Device {
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
    /// The allocation containing `address`.
    fn containing_allocation(&self, address: u64) -> Option<Allocation>;
    /// IPC handle bytes of a whole allocation (cached per allocation);
    /// `Err` when the runtime refuses to export it.
    fn export(&self, allocation: &Allocation) -> Result<Vec<u8>, String>;
    /// The copy transport: `len` bytes at `address` copied into a fresh
    /// memfd, sealed against change, for memory `export` refused.
    fn copy_to_shared_memory(&self, address: u64, len: u64) -> Result<OwnedFd, String>;
    /// Copies the `len` bytes at `address` into the staging file: their
    /// offset there, `Ok(None)` when the buffer is too large or there is no
    /// room now. By default the CPU reads the memory itself (pwrite): memory
    /// it cannot read is an `Err`, and the buffer travels another way.
    fn stage(
        &self,
        address: u64,
        len: u64,
        staging: &mut StagingFile,
    ) -> Result<Option<u64>, String> {
        staging.stage(address, len)
    }
    /// Fingerprint of `len` bytes at `address`, read by the tool itself.
    fn fingerprint(&self, address: u64, len: u64) -> Result<u64, String>;
    /// How the collector reaches an allocation [`Device::export`]ed as
    /// `handle`: an HSA IPC handle by default.
    fn ipc_transport(&self, handle: Vec<u8>) -> ditto_protocol::Transport {
        ditto_protocol::Transport::Ipc { handle }
    }
    /// Execution time of the completed dispatch whose completion signal is
    /// `held.done`, in nanoseconds; `None` when the runtime reports none.
    fn dispatch_duration_ns(&self, held: &HeldBarrier) -> Option<u64>;
}

/// Whether dispatches are being captured. Turned off once, by the first
/// failure (logged once) or by shutdown; never turned back on.
#[derive(Debug)]
pub struct CaptureSwitch {
    on: AtomicBool,
    failed: AtomicBool,
}

impl Default for CaptureSwitch {
    fn default() -> Self {
        CaptureSwitch {
            on: AtomicBool::new(true),
            failed: AtomicBool::new(false),
        }
    }
}

impl CaptureSwitch {
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Fails open: logs `reason` the first time only.
    pub fn fail(&self, reason: &str) {
        self.failed.store(true, Ordering::Release);
        if self.on.swap(false, Ordering::AcqRel) {
            log_warn!(
                "{reason}; capture stops, held dispatches are released and the application runs on unchanged"
            );
        }
    }

    /// Whether capture stopped because something failed (not by shutdown).
    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Stops capturing without a warning (shutdown).
    pub fn stop(&self) {
        self.on.store(false, Ordering::Release);
    }
}

pub struct WorkerConfig {
    pub socket: Option<PathBuf>,
    pub hello: Hello,
    pub timeout: Duration,
    /// Which arguments are captured, before and after the kernel.
    pub capture: CaptureSet,
    /// Extents given by `--arg-sizes`.
    pub arg_sizes: ArgSizes,
    /// Which dispatch indices `--dispatch` chose (the others are accounted
    /// as missed by selection).
    pub dispatch: DispatchSelection,
    /// Size of the connection's staging file (`DITTO_STAGING_MIB`; 0: none).
    pub staging_bytes: u64,
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

/// How long one wait on `done` lasts when one dispatch is held: the switch
/// and newly arrived jobs are looked at again after it.
const WAIT_SLICE: Duration = Duration::from_millis(100);
/// The same when several are held: each is looked at in turn.
const SHORT_WAIT_SLICE: Duration = Duration::from_millis(1);
/// How often frames waiting for room in the socket are retried while the
/// worker has nothing else to do.
const OUTBOX_RETRY: Duration = Duration::from_millis(1);

/// Runs until a Shutdown message (or the channel closes).
///
/// Held dispatches are handled in the order they COMPLETE, not the order
/// they were submitted: through the application's own dependencies (a
/// barrier on one queue waiting for a signal completed on another), a
/// dispatch may need work that sits behind a later job's held barrier, and
/// waiting for it first would hang the application. Indices were given at
/// submission, so snapshots keep their order whatever the capture order.
pub fn run<D: Device>(
    device: &D,
    jobs: Receiver<WorkerMessage>,
    config: WorkerConfig,
    switch: &CaptureSwitch,
) {
    let mut connection = match &config.socket {
        None => {
            switch.fail("DITTO_SOCKET is not set");
            None
        }
        Some(socket) => match CollectorConnection::open(
            socket,
            &config.hello,
            config.timeout,
            config.staging_bytes,
        ) {
            Ok(c) => {
                log_info!("connected to the collector at {}", socket.display());
                Some(c)
            }
            Err(e) => {
                switch.fail(&e.to_string());
                None
            }
        },
    };
    let mut last_pair_of_queue: HashMap<u64, HeldBarrier> = HashMap::new();
    // Held, not yet completed, in submission order.
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut shutdown: Option<(Goodbye, u64, Sender<()>)> = None;
    let mut ledger = Ledger::default();
    loop {
        // Take what has arrived; block only when nothing is held (and,
        // while frames of released dispatches wait for room in the socket,
        // only a little at a time, sending what goes in between).
        let message = if pending.is_empty() && shutdown.is_none() {
            let unsent = connection.as_ref().is_some_and(|c| c.has_unsent());
            if unsent {
                match jobs.recv_timeout(OUTBOX_RETRY) {
                    Ok(m) => Some(m),
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                        if let Some(Err(e)) = connection.as_mut().map(|c| c.flush(false)) {
                            switch.fail(&e.to_string());
                        }
                        continue;
                    }
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
            Some(WorkerMessage::Missed {
                index,
                reason,
                detail,
            }) => {
                ledger.missed(index, reason, detail);
                continue;
            }
            Some(WorkerMessage::Shutdown {
                goodbye,
                matched,
                finished,
            }) => {
                shutdown = Some((goodbye, matched, finished));
                continue;
            }
            None => {}
        }
        if pending.is_empty() {
            // Everything asked before the Shutdown is done: say goodbye, stop.
            if let Some((goodbye, matched, finished)) = shutdown.take() {
                // After a timeout the connection's frames are intact: the
                // collector, if it comes back, still learns what was missed.
                ledger.close(matched, &config.dispatch);
                send_missed(&mut connection, &mut ledger, switch);
                if let Some(conn) = connection.as_mut().filter(|c| c.writable())
                    && let Err(e) = conn.goodbye(&goodbye)
                {
                    if switch.is_on() {
                        log_warn!("could not say goodbye to the collector: {e}");
                    } else {
                        log_debug!("could not say goodbye to the collector: {e}");
                    }
                }
                switch.stop();
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
        if !switch.is_on() {
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
            // looked at again on the next round.
            device.wait_zero(pending[0].next_signal(), slice);
            continue;
        };
        if pending[at].inputs_pending {
            // All earlier work is done and the kernel has not started.
            let held = pending[at].job.held;
            let index = pending[at].job.index;
            let taken = catch_unwind(AssertUnwindSafe(|| {
                take_inputs(
                    device,
                    &pending[at].job,
                    &mut connection,
                    switch,
                    &config,
                    &mut ledger,
                )
            }));
            match taken {
                Ok(()) => pending[at].inputs_pending = false,
                Err(payload) => {
                    let reason = format!(
                        "internal error while snapshotting the inputs of a held dispatch: {}",
                        panic_message(payload.as_ref())
                    );
                    failed(&mut ledger, index, MissReason::Error, reason.clone());
                    switch.fail(&reason);
                    pending.remove(at);
                    device.release(&held);
                }
            }
            continue;
        }
        let job = pending.remove(at).expect("position is within pending").job;
        let held = job.held;
        let index = job.index;
        let handled = catch_unwind(AssertUnwindSafe(|| {
            handle_completed(
                device,
                job,
                &mut connection,
                switch,
                &mut last_pair_of_queue,
                &config,
                &mut ledger,
            )
        }));
        if let Err(payload) = handled {
            let reason = format!(
                "internal error while handling a held dispatch: {}",
                panic_message(payload.as_ref())
            );
            failed(&mut ledger, index, MissReason::Error, reason.clone());
            switch.fail(&reason);
            // Its state is unknown: released, never recycled.
            device.release(&held);
        }
    }
}

/// The first held job, in submission order, whose next signal reached 0.
/// Only the oldest job of each queue is looked at: its held barrier keeps
/// every later packet of that queue from running, so no later job there can
/// complete first. One check per queue, not per held job: a queue holding
/// a thousand dispatches costs one signal check per round, not a thousand.
fn first_completed<D: Device>(device: &D, pending: &VecDeque<Pending>) -> Option<usize> {
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
fn take_inputs<D: Device>(
    device: &D,
    job: &Job,
    connection: &mut Option<CollectorConnection>,
    switch: &CaptureSwitch,
    config: &WorkerConfig,
    ledger: &mut Ledger,
) {
    let release = || {
        if let Some(pre) = &job.held.pre {
            device.release_pre(pre);
        }
    };
    let mut released = false;
    if switch.is_on() && connection.is_some() {
        let staging = connection.as_mut().and_then(|c| c.staging());
        let (before, copies, misses) = describe(device, job, Phase::Before, config, staging);
        for (arg, detail) in misses {
            ledger.missed_buffer(job.index, arg, Phase::Before, detail);
        }
        send_missed(connection, ledger, switch);
        if let Some(conn) = connection.as_mut().filter(|_| switch.is_on())
            && !before.buffers.is_empty()
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
                Err(e) => fail_on(ledger, connection, switch, job.index, e),
            }
        }
    }
    if !released {
        release();
    }
}

/// Captures a held dispatch that has completed and releases it: at once
/// when its buffers are copies (staged or shared memory), after the
/// collector's Ack when it reads them through IPC.
fn handle_completed<D: Device>(
    device: &D,
    job: Job,
    connection: &mut Option<CollectorConnection>,
    switch: &CaptureSwitch,
    last_pair_of_queue: &mut HashMap<u64, HeldBarrier>,
    config: &WorkerConfig,
    ledger: &mut Ledger,
) {
    // This job's dispatch ran after the previous barrier on its queue.
    if let Some(previous) = last_pair_of_queue.remove(&job.queue) {
        device.recycle(previous);
    }
    let mut released = false;
    if switch.is_on() && connection.is_some() {
        let staging = connection.as_mut().and_then(|c| c.staging());
        let (dispatch, copies, misses) = describe(device, &job, Phase::After, config, staging);
        for (arg, detail) in misses {
            ledger.missed_buffer(job.index, arg, Phase::After, detail);
        }
        send_missed(connection, ledger, switch);
        let result = match connection.as_mut().filter(|_| switch.is_on()) {
            Some(conn) => {
                if !dispatch.needs_ack() {
                    device.release(&job.held);
                    released = true;
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
            Err(e) => fail_on(ledger, connection, switch, job.index, e),
        }
    }
    if !released {
        device.release(&job.held);
    }
    last_pair_of_queue.insert(job.queue, job.held);
}

/// Dispatch `index` is released uncaptured because of `error`: it is
/// missed (`timeout` when its Ack did not come in time), capture stops for
/// the same reason, and the miss is sent while the connection's frames are
/// intact.
fn fail_on(
    ledger: &mut Ledger,
    connection: &mut Option<CollectorConnection>,
    switch: &CaptureSwitch,
    index: u64,
    error: ClientError,
) {
    let reason = match error {
        ClientError::Timeout { .. } => MissReason::Timeout,
        _ => MissReason::Error,
    };
    failed(ledger, index, reason, error.to_string());
    switch.fail(&error.to_string());
    send_missed(connection, ledger, switch);
}

/// Records dispatch `index` as missed and capture as stopped for `reason`.
fn failed(ledger: &mut Ledger, index: u64, reason: MissReason, detail: String) {
    ledger.missed(
        index,
        reason,
        format!("{detail}; the dispatch was released uncaptured"),
    );
    ledger.stopped(
        reason,
        format!("capture stopped at dispatch {index}: {detail}"),
    );
}

/// Sends the ledger's queued misses while the connection can carry them
/// (best effort once capture has stopped). A failed write while capturing
/// fails open, as any connection failure does.
fn send_missed(
    connection: &mut Option<CollectorConnection>,
    ledger: &mut Ledger,
    switch: &CaptureSwitch,
) {
    let queued = ledger.take_queued();
    let Some(conn) = connection.as_mut() else {
        return;
    };
    for missed in queued {
        if !conn.writable() {
            return;
        }
        if let Err(e) = conn.missed(&missed) {
            if switch.is_on() {
                switch.fail(&e.to_string());
            } else {
                log_debug!("could not report missed dispatch {}: {e}", missed.index);
            }
        }
    }
}

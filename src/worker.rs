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

use crate::allocation_map::Allocation;
use crate::client::CollectorConnection;
use crate::guard::panic_message;
use crate::kernel_table::KernelInfo;
use crate::log::{log_debug, log_info, log_warn};
use crossbeam_channel::{Receiver, Sender};
use ditto_kernels::{ArgSizes, ParamKind};
use ditto_protocol::{
    Buffer, CaptureSet, Dispatch, Goodbye, Hello, MAX_FDS_PER_FRAME, Phase, Transport,
};
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
    /// Finish the jobs before this message, say Goodbye, acknowledge, stop.
    Shutdown {
        goodbye: Goodbye,
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
    /// Fingerprint of `len` bytes at `address`, read by the tool itself.
    fn fingerprint(&self, address: u64, len: u64) -> Result<u64, String>;
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
        Some(socket) => match CollectorConnection::open(socket, &config.hello, config.timeout) {
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
    let mut shutdown: Option<(Goodbye, Sender<()>)> = None;
    loop {
        // Take what has arrived; block only when nothing is held.
        let message = if pending.is_empty() && shutdown.is_none() {
            match jobs.recv() {
                Ok(m) => Some(m),
                Err(_) => return,
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
            Some(WorkerMessage::Shutdown { goodbye, finished }) => {
                shutdown = Some((goodbye, finished));
                continue;
            }
            None => {}
        }
        if pending.is_empty() {
            // Everything asked before the Shutdown is done: say goodbye, stop.
            if let Some((goodbye, finished)) = shutdown.take() {
                if let (Some(conn), true) = (connection.as_mut(), switch.is_on())
                    && let Err(e) = conn.goodbye(&goodbye)
                {
                    log_warn!("could not say goodbye to the collector: {e}");
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
        let completed = pending
            .iter()
            .position(|p| device.wait_zero(p.next_signal(), Duration::ZERO));
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
            let taken = catch_unwind(AssertUnwindSafe(|| {
                take_inputs(device, &pending[at].job, &mut connection, switch, &config)
            }));
            match taken {
                Ok(()) => pending[at].inputs_pending = false,
                Err(payload) => {
                    switch.fail(&format!(
                        "internal error while snapshotting the inputs of a held dispatch: {}",
                        panic_message(payload.as_ref())
                    ));
                    pending.remove(at);
                    device.release(&held);
                }
            }
            continue;
        }
        let job = pending.remove(at).expect("position is within pending").job;
        let held = job.held;
        let handled = catch_unwind(AssertUnwindSafe(|| {
            handle_completed(
                device,
                job,
                &mut connection,
                switch,
                &mut last_pair_of_queue,
                &config,
            )
        }));
        if let Err(payload) = handled {
            switch.fail(&format!(
                "internal error while handling a held dispatch: {}",
                panic_message(payload.as_ref())
            ));
            // Its state is unknown: released, never recycled.
            device.release(&held);
        }
    }
}

/// Snapshots the inputs of a held dispatch whose `pre` barrier completed
/// (everything before it in the queue has run, the kernel has not), then
/// lets the kernel start. Nothing is sent when no argument is selected.
fn take_inputs<D: Device>(
    device: &D,
    job: &Job,
    connection: &mut Option<CollectorConnection>,
    switch: &CaptureSwitch,
    config: &WorkerConfig,
) {
    if switch.is_on()
        && let Some(conn) = connection.as_mut()
    {
        let (before, copies) = describe(device, job, Phase::Before, config);
        if !before.buffers.is_empty() {
            match conn.dispatch(before, copies) {
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
                Err(e) => switch.fail(&e.to_string()),
            }
        }
    }
    if let Some(pre) = &job.held.pre {
        device.release_pre(pre);
    }
}

/// Captures a held dispatch that has completed, then releases it.
fn handle_completed<D: Device>(
    device: &D,
    job: Job,
    connection: &mut Option<CollectorConnection>,
    switch: &CaptureSwitch,
    last_pair_of_queue: &mut HashMap<u64, HeldBarrier>,
    config: &WorkerConfig,
) {
    // This job's dispatch ran after the previous barrier on its queue.
    if let Some(previous) = last_pair_of_queue.remove(&job.queue) {
        device.recycle(previous);
    }
    if switch.is_on()
        && let Some(conn) = connection.as_mut()
    {
        let (dispatch, copies) = describe(device, &job, Phase::After, config);
        match conn.dispatch(dispatch, copies) {
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
            Err(e) => switch.fail(&e.to_string()),
        }
    }
    device.release(&job.held);
    last_pair_of_queue.insert(job.queue, job.held);
}

/// The protocol message for one snapshot of a dispatch: every pointer
/// argument `capture` selects for `phase` (by default the non-const ones,
/// after the kernel), each exported as its whole containing allocation, and
/// the shared-memory copies that go with it (in buffer order).
///
/// Transport per buffer: IPC when the runtime exports the allocation; when
/// it refuses (locked host memory, fine-grained system memory, virtual-memory
/// allocations), the tool copies the extent into a sealed memfd sent with
/// the message. Memory the runtime does not know at all (plain malloc) is
/// captured only when `--arg-sizes` gives its extent: the user vouches for
/// the range, which is copied from the pointer on (an unreadable range is
/// an error, never a fault); without it, it is not captured (warning).
/// The fingerprint is always the tool's own read of the same bytes.
pub fn describe<D: Device>(
    device: &D,
    job: &Job,
    phase: Phase,
    config: &WorkerConfig,
) -> (Dispatch, Vec<OwnedFd>) {
    let capture = config.capture;
    let kernel = &job.kernel;
    let mut buffers = Vec::new();
    let mut copies = Vec::new();
    if let Some(sig) = &kernel.signature {
        for param in &sig.params {
            let ParamKind::Pointer { dtype, is_const } = param.kind else {
                continue;
            };
            if !capture.captures(phase, is_const) {
                continue;
            }
            let Some(address) = param.read_pointer(&job.kernarg) else {
                continue;
            };
            if address == 0 {
                continue;
            }
            let what = || {
                format!(
                    "dispatch {} of `{}`: argument {}",
                    job.index, kernel.name.demangled, param.index
                )
            };
            let sized = config
                .arg_sizes
                .elements(param.index, &sig.params, &job.kernarg);
            let (alloc, known) = match (device.containing_allocation(address), &sized) {
                (Some(alloc), _) => (alloc, true),
                (None, Ok(Some(elements))) => match elements.checked_mul(dtype.size() as u64) {
                    Some(bytes) => {
                        log_info!(
                            "{} (0x{address:x}) is in no allocation the runtime knows; \
                             --arg-sizes gives {bytes} bytes: copied into shared memory",
                            what()
                        );
                        (
                            Allocation {
                                base: address,
                                size: bytes,
                            },
                            false,
                        )
                    }
                    None => {
                        log_warn!(
                            "{}: --arg-sizes gives {elements} elements of {}, too many bytes; not captured",
                            what(),
                            dtype.name()
                        );
                        continue;
                    }
                },
                (None, _) => {
                    log_warn!(
                        "{} (0x{address:x}) is in no allocation the runtime knows; not captured \
                         (give its size with --arg-sizes to capture it by copy)",
                        what()
                    );
                    continue;
                }
            };
            let offset = address - alloc.base;
            let rest = alloc.size - offset;
            // A slice of a larger allocation (a caching allocator's) covers
            // what --arg-sizes says; without it, the rest of the allocation.
            let extent = match sized {
                Ok(None) => rest,
                Ok(Some(elements)) => match elements.checked_mul(dtype.size() as u64) {
                    Some(bytes) if bytes <= rest => bytes,
                    _ => {
                        log_warn!(
                            "{}: --arg-sizes gives {elements} elements of {}, \
                             but only {rest} bytes remain in its allocation (0x{:x}, {} bytes); not captured",
                            what(),
                            dtype.name(),
                            alloc.base,
                            alloc.size
                        );
                        continue;
                    }
                },
                Err(e) => {
                    log_warn!("{}: {e}; not captured", what());
                    continue;
                }
            };
            let exported = if known {
                device.export(&alloc).map_err(|e| {
                    log_info!(
                        "{}: the runtime does not export allocation 0x{:x}+{} over IPC ({e}); \
                         its {extent} bytes are copied into shared memory",
                        what(),
                        alloc.base,
                        alloc.size
                    );
                })
            } else {
                Err(())
            };
            let transport = match exported {
                Ok(handle) => Transport::Ipc { handle },
                Err(()) if copies.len() >= MAX_FDS_PER_FRAME => {
                    log_warn!(
                        "{}: more than {MAX_FDS_PER_FRAME} buffers of one dispatch need a \
                         shared-memory copy; not captured",
                        what()
                    );
                    continue;
                }
                Err(()) => match device.copy_to_shared_memory(address, extent) {
                    Ok(fd) => {
                        copies.push(fd);
                        Transport::SharedMemory
                    }
                    Err(e) => {
                        log_warn!("{}: {e}; not captured", what());
                        continue;
                    }
                },
            };
            let fingerprint = match device.fingerprint(address, extent) {
                Ok(f) => f,
                Err(e) => {
                    log_warn!("{}: {e}; not captured", what());
                    if matches!(transport, Transport::SharedMemory) {
                        copies.pop();
                    }
                    continue;
                }
            };
            buffers.push(Buffer {
                phase,
                arg_index: param.index,
                // From the code object's metadata (-fhip-kernel-arg-name); demangled
                // names carry none.
                name: sig.arg_name(param.index).map(str::to_string),
                dtype,
                transport,
                owner_pid: std::process::id(),
                alloc_base: alloc.base,
                alloc_size: alloc.size,
                offset,
                extent,
                fingerprint,
            });
        }
    }
    let dispatch = Dispatch {
        index: job.index,
        kernel: kernel.name.clone(),
        grid: job.grid,
        block: job.block,
        duration_ns: match phase {
            Phase::Before => None,
            Phase::After => device.dispatch_duration_ns(&job.held),
        },
        buffers,
    };
    (dispatch, copies)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocation_map::AllocationMap;
    use crate::kernel_table::KernelInfo;
    use crossbeam_channel::unbounded;
    use ditto_protocol::{
        Ack, CollectorMessage, PROTOCOL_VERSION, ToolMessage, read_frame, write_frame,
    };
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixListener;
    use std::sync::Mutex;
    use std::thread;

    /// A runtime whose dispatches are complete at once and whose memory is
    /// this process's heap; it records what the worker did, in order.
    #[derive(Default)]
    struct FakeDevice {
        allocations: AllocationMap,
        events: Mutex<Vec<String>>,
        /// Simulates a bug in ditto's own code while describing a buffer.
        panic_on_export: bool,
        /// Allocation bases whose IPC export the runtime refuses.
        export_refused: std::collections::HashSet<u64>,
        /// done → hold: that dispatch completes only once that hold is
        /// released (an application dependency across queues).
        completes_after_release: HashMap<u64, u64>,
        released: Mutex<Vec<u64>>,
    }

    impl FakeDevice {
        fn events(&self) -> Vec<String> {
            self.events.lock().unwrap().clone()
        }
        fn log(&self, e: String) {
            self.events.lock().unwrap().push(e);
        }
    }

    impl Device for FakeDevice {
        fn wait_zero(&self, signal: u64, _timeout: Duration) -> bool {
            self.log(format!("wait {signal}"));
            match self.completes_after_release.get(&signal) {
                Some(hold) => self.released.lock().unwrap().contains(hold),
                None => true,
            }
        }
        fn release(&self, held: &HeldBarrier) {
            if let Some(pre) = &held.pre {
                self.release_pre(pre);
            }
            self.released.lock().unwrap().push(held.hold);
            self.log(format!("release {}", held.hold));
        }
        fn release_pre(&self, pre: &PreHold) {
            self.released.lock().unwrap().push(pre.hold_pre);
            self.log(format!("release {}", pre.hold_pre));
        }
        fn recycle(&self, held: HeldBarrier) {
            self.log(format!("recycle {}", held.done));
        }
        fn containing_allocation(&self, address: u64) -> Option<Allocation> {
            self.allocations.find(address)
        }
        fn export(&self, allocation: &Allocation) -> Result<Vec<u8>, String> {
            assert!(!self.panic_on_export, "export exploded");
            if self.export_refused.contains(&allocation.base) {
                return Err("status 0x1001 (invalid argument)".into());
            }
            Ok(allocation.base.to_le_bytes().repeat(4))
        }
        fn copy_to_shared_memory(&self, address: u64, len: u64) -> Result<OwnedFd, String> {
            self.log(format!("copy {len}"));
            crate::shared_memory::copy_to_sealed_memfd(address, len)
        }
        fn dispatch_duration_ns(&self, held: &HeldBarrier) -> Option<u64> {
            Some(1000 + held.done)
        }
        fn fingerprint(&self, address: u64, len: u64) -> Result<u64, String> {
            // SAFETY: tests only pass ranges of live Vecs they own.
            let bytes = unsafe { std::slice::from_raw_parts(address as *const u8, len as usize) };
            Ok(ditto_protocol::fingerprint(bytes))
        }
    }

    fn reduce_sum() -> Arc<KernelInfo> {
        Arc::new(KernelInfo::new("_Z10reduce_sumPKfPfi.kd", 20, Some("reduce_sum"), None).0)
    }

    /// reduce_sum(input, output + 2, n): output is an interior pointer.
    fn job(index: u64, queue: u64, input: &[f32], output: &[f32]) -> Job {
        let mut kernarg = vec![0u8; 20];
        kernarg[0..8].copy_from_slice(&(input.as_ptr() as u64).to_le_bytes());
        kernarg[8..16].copy_from_slice(&(output.as_ptr() as u64 + 8).to_le_bytes());
        kernarg[16..20].copy_from_slice(&(input.len() as i32).to_le_bytes());
        Job {
            index,
            kernel: reduce_sum(),
            grid: [64, 1, 1],
            block: [32, 1, 1],
            kernarg,
            held: HeldBarrier {
                done: 100 + index * 2,
                hold: 101 + index * 2,
                pre: None,
            },
            queue,
        }
    }

    fn hello() -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            pid: std::process::id(),
            run: "test".into(),
            kernel_query: "reduce_sum".into(),
            command_line: vec!["app".into()],
            working_directory: "/".into(),
            rank: None,
        }
    }

    /// A collector's side of the handshake: accepts one tool, reads its
    /// Hello and answers Welcome.
    fn accept_and_welcome(listener: &UnixListener) -> (std::os::unix::net::UnixStream, Hello) {
        let (mut s, _) = listener.accept().unwrap();
        let ToolMessage::Hello(h) = read_frame(&mut s).unwrap() else {
            panic!("expected Hello")
        };
        write_frame(
            &mut s,
            &CollectorMessage::Welcome {
                version: PROTOCOL_VERSION,
            },
        )
        .unwrap();
        (s, h)
    }

    /// Runs the worker over `messages` and returns once it has finished.
    fn run_worker(
        device: &FakeDevice,
        socket: Option<PathBuf>,
        timeout: Duration,
        jobs: Vec<Job>,
    ) -> (CaptureSwitch, Goodbye) {
        run_worker_capturing(device, socket, timeout, jobs, CaptureSet::default())
    }

    fn run_worker_capturing(
        device: &FakeDevice,
        socket: Option<PathBuf>,
        timeout: Duration,
        jobs: Vec<Job>,
        capture: CaptureSet,
    ) -> (CaptureSwitch, Goodbye) {
        run_worker_with(device, socket, timeout, jobs, capture, ArgSizes::default())
    }

    fn run_worker_with(
        device: &FakeDevice,
        socket: Option<PathBuf>,
        timeout: Duration,
        jobs: Vec<Job>,
        capture: CaptureSet,
        arg_sizes: ArgSizes,
    ) -> (CaptureSwitch, Goodbye) {
        let (tx, rx) = unbounded();
        for j in jobs {
            tx.send(WorkerMessage::Job(j)).unwrap();
        }
        let (finished, done) = crossbeam_channel::bounded(1);
        let goodbye = Goodbye {
            dispatched: vec![(reduce_sum().name.clone(), 1)],
        };
        tx.send(WorkerMessage::Shutdown {
            goodbye: goodbye.clone(),
            finished,
        })
        .unwrap();
        let switch = CaptureSwitch::default();
        run(
            device,
            rx,
            WorkerConfig {
                socket,
                hello: hello(),
                timeout,
                capture,
                arg_sizes,
            },
            &switch,
        );
        done.try_recv().expect("shutdown acknowledged");
        (switch, goodbye)
    }

    /// `job` with its inputs held too: `pre` 200 + 2i, `hold_pre` 201 + 2i.
    fn job_with_inputs(index: u64, input: &[f32], output: &[f32]) -> Job {
        let mut j = job(index, 1, input, output);
        j.held.pre = Some(PreHold {
            pre: 200 + index * 2,
            hold_pre: 201 + index * 2,
        });
        j
    }

    #[test]
    fn inputs_are_sent_before_the_kernel_may_start_and_outputs_after_it_ran() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("collector.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let device = Arc::new(FakeDevice::default());
        let (input, output) = (vec![0.5f32, 1.0, 1.5, 2.0], vec![7.0f32; 4]);
        device.allocations.insert(input.as_ptr() as u64, 16);
        device.allocations.insert(output.as_ptr() as u64, 16);
        let seen = device.clone();
        let collector = thread::spawn(move || {
            let (mut s, _) = accept_and_welcome(&listener);
            let mut got = Vec::new();
            loop {
                match read_frame(&mut s).unwrap() {
                    ToolMessage::Dispatch(d) => {
                        let kernel_may_run = seen.events().iter().any(|e| e == "release 201");
                        got.push((d, kernel_may_run));
                        let ack = CollectorMessage::Ack(Ack {
                            index: got.last().unwrap().0.index,
                            result: Ok(()),
                        });
                        write_frame(&mut s, &ack).unwrap();
                    }
                    ToolMessage::Goodbye(_) => return got,
                    other => panic!("unexpected {other:?}"),
                }
            }
        });
        let capture = CaptureSet::parse("inputs,outputs").unwrap();
        let (switch, _) = run_worker_capturing(
            &device,
            Some(socket),
            Duration::from_secs(5),
            vec![job_with_inputs(0, &input, &output)],
            capture,
        );
        let got = collector.join().unwrap();
        assert!(!switch.has_failed());
        // `release` stores 0 to `hold_pre` again (idempotent): every release
        // path frees both barriers, whatever stage the job reached.
        assert_eq!(
            device.events(),
            vec![
                "wait 200",
                "release 201",
                "wait 100",
                "release 201",
                "release 101"
            ]
        );
        assert_eq!(got.len(), 2, "one message per snapshot");
        let (before, kernel_ran_before) = &got[0];
        assert!(
            !kernel_ran_before,
            "inputs acked before hold_pre is released"
        );
        assert_eq!(before.index, 0);
        assert_eq!(before.duration_ns, None);
        let b = &before.buffers;
        assert_eq!(b.len(), 1);
        assert_eq!((b[0].arg_index, b[0].phase), (0, Phase::Before));
        assert_eq!(b[0].extent, 16);
        let input_bytes: Vec<u8> = input.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(b[0].fingerprint, ditto_protocol::fingerprint(&input_bytes));
        let (after, _) = &got[1];
        assert_eq!(after.index, 0);
        let a = &after.buffers;
        assert_eq!(a.len(), 1);
        assert_eq!((a[0].arg_index, a[0].phase), (1, Phase::After));
        assert_eq!(after.duration_ns, Some(1100));
    }

    #[test]
    fn an_unanswered_inputs_snapshot_times_out_and_releases_both_barriers() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("silent.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let collector = thread::spawn(move || {
            let (mut s, _) = accept_and_welcome(&listener);
            let first: ToolMessage = read_frame(&mut s).unwrap();
            // Never acks; keeps the connection open until the tool gives up.
            let mut rest = Vec::new();
            let _ = std::io::Read::read_to_end(&mut s, &mut rest);
            first
        });
        let device = FakeDevice::default();
        let (input, output) = (vec![1.0f32; 4], vec![0.0f32; 4]);
        device.allocations.insert(input.as_ptr() as u64, 16);
        let started = std::time::Instant::now();
        let (switch, _) = run_worker_capturing(
            &device,
            Some(socket),
            Duration::from_millis(300),
            vec![job_with_inputs(0, &input, &output)],
            CaptureSet::parse("inputs,outputs").unwrap(),
        );
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(switch.has_failed());
        let ToolMessage::Dispatch(sent) = collector.join().unwrap() else {
            panic!("expected the inputs Dispatch")
        };
        assert_eq!(sent.buffers[0].phase, Phase::Before);
        let events = device.events();
        assert_eq!(events.first().map(String::as_str), Some("wait 200"));
        assert!(
            !events.contains(&"wait 100".to_string()),
            "the dispatch is not waited for once capture failed: {events:?}"
        );
        assert_eq!(
            events.iter().rev().take(2).collect::<Vec<_>>(),
            vec!["release 101", "release 201"],
            "the job ends fully released: {events:?}"
        );
    }

    /// The buffers of the one dispatch a collector received, acking it.
    fn collect_one(listener: UnixListener) -> thread::JoinHandle<Vec<Buffer>> {
        thread::spawn(move || {
            let (mut s, _) = accept_and_welcome(&listener);
            let ToolMessage::Dispatch(d) = read_frame(&mut s).unwrap() else {
                panic!("expected Dispatch")
            };
            let ack = CollectorMessage::Ack(Ack {
                index: d.index,
                result: Ok(()),
            });
            write_frame(&mut s, &ack).unwrap();
            let _: ToolMessage = read_frame(&mut s).unwrap();
            d.buffers
        })
    }

    /// Like `collect_one`, also reading the shared-memory copies that came
    /// with the message (each file's bytes, in order).
    fn collect_one_with_copies(
        listener: UnixListener,
    ) -> thread::JoinHandle<(Vec<Buffer>, Vec<Vec<u8>>)> {
        thread::spawn(move || {
            let (mut s, _) = accept_and_welcome(&listener);
            let (ToolMessage::Dispatch(d), fds) = ditto_protocol::read_frame_with_fds(&s).unwrap()
            else {
                panic!("expected Dispatch")
            };
            let copies = fds
                .into_iter()
                .map(|fd| std::fs::read(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap())
                .collect();
            let ack = CollectorMessage::Ack(Ack {
                index: d.index,
                result: Ok(()),
            });
            write_frame(&mut s, &ack).unwrap();
            let _: ToolMessage = read_frame(&mut s).unwrap();
            (d.buffers, copies)
        })
    }

    #[test]
    fn an_allocation_the_runtime_will_not_export_travels_as_a_shared_memory_copy() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("collector.sock");
        let collector = collect_one_with_copies(UnixListener::bind(&socket).unwrap());
        let (input, output) = (vec![1.0f32; 4], vec![3.0f32, 4.0, 5.0, 6.0]);
        let mut device = FakeDevice::default();
        device.allocations.insert(output.as_ptr() as u64, 16);
        device.export_refused.insert(output.as_ptr() as u64);
        run_worker(
            &device,
            Some(socket),
            Duration::from_secs(5),
            vec![job(0, 1, &input, &output)],
        );
        let (buffers, copies) = collector.join().unwrap();
        assert_eq!(buffers.len(), 1);
        let b = &buffers[0];
        assert_eq!(b.transport, Transport::SharedMemory);
        assert_eq!(
            (b.offset, b.extent),
            (8, 8),
            "the argument points 2 floats in"
        );
        let tail: Vec<u8> = [5.0f32, 6.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(copies, vec![tail.clone()], "one copy: the extent's bytes");
        assert_eq!(b.fingerprint, ditto_protocol::fingerprint(&tail));
        assert!(device.events().contains(&"copy 8".to_string()));
    }

    #[test]
    fn memory_no_allocation_holds_is_copied_only_when_arg_sizes_gives_its_extent() {
        // reduce_sum(input, output + 2 floats, n = 3), nothing registered:
        // the runtime knows neither buffer (plain malloc).
        let (input, output) = (vec![1.0f32; 3], vec![0.0f32, 0.0, 7.0, 8.0, 9.0, 10.0]);
        let run_with = |sizes: &str| {
            let dir = tempfile::tempdir().unwrap();
            let socket = dir.path().join("collector.sock");
            let collector = collect_one_with_copies(UnixListener::bind(&socket).unwrap());
            let device = FakeDevice::default();
            run_worker_with(
                &device,
                Some(socket),
                Duration::from_secs(5),
                vec![job(0, 1, &input, &output)],
                CaptureSet::default(),
                ArgSizes::parse(sizes).unwrap(),
            );
            collector.join().unwrap()
        };
        let (buffers, copies) = run_with("arg1=arg2");
        assert_eq!(buffers.len(), 1);
        let b = &buffers[0];
        assert_eq!(b.transport, Transport::SharedMemory);
        assert_eq!(
            (b.alloc_base, b.alloc_size, b.offset, b.extent),
            (output.as_ptr() as u64 + 8, 12, 0, 12),
            "the range --arg-sizes gives, from the pointer on"
        );
        let expected: Vec<u8> = [7.0f32, 8.0, 9.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(copies, vec![expected]);
        let (without, none) = run_with("arg0=arg2");
        assert!(
            without.is_empty() && none.is_empty(),
            "not captured: {without:?}"
        );
    }

    #[test]
    fn arg_sizes_set_the_extent_of_a_slice_and_one_past_its_allocation_is_not_captured() {
        // reduce_sum(input, output + 2 floats, n = 3): output's allocation
        // is 64 bytes, 56 of them from the argument on.
        let (input, output) = (vec![1.0f32; 3], vec![0.0f32; 16]);
        let run_with = |sizes: &str| {
            let dir = tempfile::tempdir().unwrap();
            let socket = dir.path().join("collector.sock");
            let collector = collect_one(UnixListener::bind(&socket).unwrap());
            let device = FakeDevice::default();
            device.allocations.insert(output.as_ptr() as u64, 64);
            run_worker_with(
                &device,
                Some(socket),
                Duration::from_secs(5),
                vec![job(0, 1, &input, &output)],
                CaptureSet::default(),
                ArgSizes::parse(sizes).unwrap(),
            );
            collector.join().unwrap()
        };
        let sized = run_with("arg1=arg2*2");
        assert_eq!(sized.len(), 1);
        assert_eq!((sized[0].offset, sized[0].extent), (8, 24), "3*2 floats");
        let to_the_end = run_with("arg0=arg2");
        assert_eq!(to_the_end[0].extent, 56, "to the end of the allocation");
        assert!(
            run_with("arg1=arg2*5").is_empty(),
            "60 bytes do not fit in 56"
        );
    }

    #[test]
    fn a_job_holding_inputs_is_released_entirely_when_capture_fails_open() {
        let dir = tempfile::tempdir().unwrap();
        let device = FakeDevice::default();
        let (input, output) = (vec![1.0f32; 4], vec![0.0f32; 4]);
        let (switch, _) = run_worker_capturing(
            &device,
            Some(dir.path().join("no-collector.sock")),
            Duration::from_millis(200),
            vec![job_with_inputs(0, &input, &output)],
            CaptureSet::parse("all").unwrap(),
        );
        assert!(switch.has_failed());
        assert_eq!(
            device.events(),
            vec!["release 201", "release 101"],
            "hold_pre first, then hold, without waiting"
        );
    }

    #[test]
    fn without_a_collector_every_job_is_released_and_capture_stops() {
        let dir = tempfile::tempdir().unwrap();
        let device = FakeDevice::default();
        let (input, output) = (vec![1.0f32; 16], vec![0.0f32; 4]);
        let (switch, _) = run_worker(
            &device,
            Some(dir.path().join("no-collector.sock")),
            Duration::from_millis(200),
            vec![job(0, 1, &input, &output), job(1, 1, &input, &output)],
        );
        assert!(switch.has_failed());
        assert_eq!(
            device.events(),
            vec!["release 101", "release 103"],
            "released at once, without waiting"
        );
    }

    #[test]
    fn release_waits_for_the_collectors_ack_and_buffers_describe_the_output_allocation() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("collector.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let device = Arc::new(FakeDevice::default());
        let (input, output) = (vec![1.5f32; 16], vec![3.0f32, 4.0, 5.0, 6.0]);
        device.allocations.insert(input.as_ptr() as u64, 64);
        device.allocations.insert(output.as_ptr() as u64, 16);
        let output_base = output.as_ptr() as u64;
        let expected_fingerprint =
            ditto_protocol::fingerprint(&[5.0f32.to_le_bytes(), 6.0f32.to_le_bytes()].concat());

        let seen = device.clone();
        let collector = thread::spawn(move || {
            let (mut s, h) = accept_and_welcome(&listener);
            let ToolMessage::Dispatch(d) = read_frame(&mut s).unwrap() else {
                panic!("expected Dispatch")
            };
            thread::sleep(Duration::from_millis(50));
            let released_before_ack = seen.events().iter().any(|e| e.starts_with("release"));
            write_frame(
                &mut s,
                &CollectorMessage::Ack(Ack {
                    index: d.index,
                    result: Ok(()),
                }),
            )
            .unwrap();
            let ToolMessage::Goodbye(g) = read_frame(&mut s).unwrap() else {
                panic!("expected Goodbye")
            };
            (h, d, released_before_ack, g)
        });
        let (switch, goodbye) = run_worker(
            &device,
            Some(socket),
            Duration::from_secs(5),
            vec![job(0, 1, &input, &output)],
        );
        let (h, d, released_before_ack, g) = collector.join().unwrap();

        assert_eq!(h.kernel_query, "reduce_sum");
        assert!(!switch.has_failed());
        assert!(
            !released_before_ack,
            "the barrier was released before the ack"
        );
        assert_eq!(device.events(), vec!["wait 100", "release 101"]);
        assert_eq!(d.index, 0);
        assert_eq!(d.kernel.demangled, "reduce_sum(float const*, float*, int)");
        assert_eq!((d.grid, d.block), ([64, 1, 1], [32, 1, 1]));
        assert_eq!(
            d.duration_ns,
            Some(1100),
            "the device's time for `done` 100"
        );
        assert_eq!(
            d.buffers.len(),
            1,
            "only the non-const pointer is an output"
        );
        let b = &d.buffers[0];
        assert_eq!((b.arg_index, b.dtype), (1, ditto_protocol::DType::F32));
        assert_eq!(
            (b.alloc_base, b.alloc_size, b.offset, b.extent),
            (output_base, 16, 8, 8)
        );
        assert_eq!(
            b.transport,
            Transport::Ipc {
                handle: output_base.to_le_bytes().repeat(4)
            }
        );
        assert_eq!(b.owner_pid, std::process::id());
        assert_eq!(b.fingerprint, expected_fingerprint);
        assert_eq!(g, goodbye);
    }

    #[test]
    fn a_dispatch_waiting_on_a_later_held_dispatch_is_captured_after_it_without_deadlock() {
        // Dispatch 0 (queue 1) depends, through the application's own
        // signals, on work queued behind dispatch 1's held barrier (queue 2).
        // Waiting for dispatch 0 first would never end.
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("collector.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let (first, second) = (
            job(0, 1, &[1.0; 4], &[0.0; 4]),
            job(1, 2, &[1.0; 4], &[0.0; 4]),
        );
        let mut device = FakeDevice::default();
        device
            .completes_after_release
            .insert(first.held.done, second.held.hold);
        for j in [&first, &second] {
            let kernarg = &j.kernarg;
            for at in [0usize, 8] {
                let ptr = u64::from_le_bytes(kernarg[at..at + 8].try_into().unwrap());
                device
                    .allocations
                    .insert(ptr - if at == 8 { 8 } else { 0 }, 16);
            }
        }
        let collector = thread::spawn(move || {
            let (mut s, _) = accept_and_welcome(&listener);
            let mut indices = Vec::new();
            loop {
                match read_frame(&mut s).unwrap() {
                    ToolMessage::Dispatch(d) => {
                        indices.push(d.index);
                        let ack = CollectorMessage::Ack(Ack {
                            index: d.index,
                            result: Ok(()),
                        });
                        write_frame(&mut s, &ack).unwrap();
                    }
                    ToolMessage::Goodbye(_) => return indices,
                    other => panic!("unexpected {other:?}"),
                }
            }
        });
        let (first_hold, second_hold) = (first.held.hold, second.held.hold);
        let (switch, _) = run_worker(
            &device,
            Some(socket),
            Duration::from_secs(5),
            vec![first, second],
        );
        let captured = collector.join().unwrap();

        assert!(!switch.has_failed());
        assert_eq!(
            captured,
            vec![1, 0],
            "captured in completion order, indices kept"
        );
        assert_eq!(
            *device.released.lock().unwrap(),
            vec![second_hold, first_hold]
        );
    }

    #[test]
    fn ack_timeout_fails_open_and_later_jobs_are_released_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("silent.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let collector = thread::spawn(move || {
            let (mut s, _) = accept_and_welcome(&listener);
            let _: ToolMessage = read_frame(&mut s).unwrap();
            // Never acks; keeps the connection open until the tool gives up.
            let mut rest = Vec::new();
            let _ = std::io::Read::read_to_end(&mut s, &mut rest);
        });
        let device = FakeDevice::default();
        let (input, output) = (vec![1.0f32; 16], vec![0.0f32; 4]);
        device.allocations.insert(output.as_ptr() as u64, 16);
        let started = std::time::Instant::now();
        let (switch, _) = run_worker(
            &device,
            Some(socket),
            Duration::from_millis(300),
            vec![job(0, 1, &input, &output), job(1, 1, &input, &output)],
        );
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(switch.has_failed());
        assert_eq!(
            device.events(),
            vec!["wait 100", "release 101", "release 103"]
        );
        collector.join().unwrap();
    }

    #[test]
    fn a_pair_is_recycled_only_after_a_later_dispatch_on_its_queue_completed() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("collector.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let collector = thread::spawn(move || {
            let (mut s, _) = accept_and_welcome(&listener);
            while let Ok(ToolMessage::Dispatch(d)) = read_frame::<_, ToolMessage>(&mut s) {
                write_frame(
                    &mut s,
                    &CollectorMessage::Ack(Ack {
                        index: d.index,
                        result: Ok(()),
                    }),
                )
                .unwrap();
            }
        });
        let device = FakeDevice::default();
        let (input, output) = (vec![1.0f32; 16], vec![0.0f32; 4]);
        // Jobs 0 and 2 on queue 1, job 1 on queue 2.
        let jobs = vec![
            job(0, 1, &input, &output),
            job(1, 2, &input, &output),
            job(2, 1, &input, &output),
        ];
        let (switch, _) = run_worker(&device, Some(socket), Duration::from_secs(5), jobs);
        collector.join().unwrap();
        assert!(!switch.has_failed());
        assert_eq!(
            device.events(),
            vec![
                "wait 100",
                "release 101",
                "wait 102",
                "release 103",
                "wait 104",
                "recycle 100",
                "release 105"
            ]
        );
    }
    #[test]
    fn a_panic_while_handling_a_job_releases_it_and_fails_open() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("collector.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let collector = thread::spawn(move || {
            let (mut s, _) = accept_and_welcome(&listener);
            // Nothing more arrives: the worker gave up before sending.
            let mut rest = Vec::new();
            let _ = std::io::Read::read_to_end(&mut s, &mut rest);
            rest.len()
        });
        let device = FakeDevice {
            panic_on_export: true,
            ..FakeDevice::default()
        };
        let (input, output) = (vec![1.0f32; 16], vec![0.0f32; 4]);
        device.allocations.insert(output.as_ptr() as u64, 16);
        let (switch, _) = run_worker(
            &device,
            Some(socket),
            Duration::from_secs(5),
            vec![job(0, 1, &input, &output), job(1, 1, &input, &output)],
        );
        assert!(switch.has_failed());
        assert_eq!(
            device.events(),
            vec!["wait 100", "release 101", "release 103"],
            "the job that panicked is released, the next one without waiting"
        );
        assert_eq!(collector.join().unwrap(), 0, "no partial message");
    }
}

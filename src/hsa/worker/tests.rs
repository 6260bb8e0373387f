//! Tests of the worker against a fake Device and a collector on a real
//! Unix socket.

use super::*;
use crate::capture::allocation_map::{Allocation, AllocationMap};
use crate::capture::kernel_table::KernelInfo;
use crossbeam_channel::unbounded;
use ditto_kernels::ArgSizes;
use ditto_protocol::CaptureSet;
use ditto_protocol::{
    Ack, CollectorMessage, PROTOCOL_VERSION, ToolMessage, read_frame, write_frame,
};
use ditto_protocol::{Buffer, Dispatch, Transport};
use std::os::fd::AsRawFd;
use std::os::fd::OwnedFd;
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

impl HeldSignals for FakeDevice {
    fn wait_zero(&self, signal: u64, _timeout: Duration) -> bool {
        self.log(format!("wait {signal}"));
        match self.completes_after_release.get(&signal) {
            Some(hold) => self.released.lock().unwrap().contains(hold),
            None => true,
        }
    }
    /// Exactly once per job: a second release would take a second 1 from
    /// the application's signal.
    fn release(&self, held: &HeldBarrier) {
        if let Some(pre) = &held.pre {
            self.release_pre(pre);
        }
        assert!(
            !self.released.lock().unwrap().contains(&held.hold),
            "hold {} released twice",
            held.hold
        );
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
    /// Only through the agent of the job's queue, as ROCr.
    fn dispatch_duration_ns(&self, held: &HeldBarrier, agent: u64) -> Option<u64> {
        (agent == 0x6a).then_some(1000 + held.done)
    }
}

/// Why the fake refuses: a runtime's words, or a copy that failed.
#[derive(Debug, thiserror::Error)]
enum FakeError {
    #[error("{0}")]
    Refused(&'static str),
    #[error(transparent)]
    Copy(#[from] crate::capture::shared_memory::CopyError),
}

impl BufferAccess for FakeDevice {
    type Error = FakeError;

    fn containing_allocation(&self, address: u64) -> Option<Allocation> {
        self.allocations.find(address)
    }
    fn export(&self, allocation: &Allocation) -> Result<Transport, FakeError> {
        assert!(!self.panic_on_export, "export exploded");
        if self.export_refused.contains(&allocation.base) {
            return Err(FakeError::Refused("status 0x1001 (invalid argument)"));
        }
        Ok(Transport::Ipc {
            handle: allocation.base.to_le_bytes().repeat(4),
            owner_node: None,
        })
    }
    fn copy_to_shared_memory(&self, address: u64, len: u64) -> Result<OwnedFd, FakeError> {
        self.log(format!("copy {len}"));
        Ok(crate::capture::shared_memory::copy_to_sealed_memfd(
            address, len,
        )?)
    }
    fn fingerprint(&self, address: u64, len: u64) -> Result<u64, FakeError> {
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
        segments: Default::default(),
        held: HeldBarrier {
            done: 100 + index * 2,
            hold: 101 + index * 2,
            pre: None,
            app: 0,
        },
        queue,
        agent: 0x6a,
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
        api: ditto_protocol::Api::Hsa,
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
) -> (Lifecycle, Goodbye) {
    run_worker_capturing(device, socket, timeout, jobs, CaptureSet::default())
}

fn run_worker_capturing(
    device: &FakeDevice,
    socket: Option<PathBuf>,
    timeout: Duration,
    jobs: Vec<Job>,
    capture: CaptureSet,
) -> (Lifecycle, Goodbye) {
    run_worker_with(device, socket, timeout, jobs, capture, ArgSizes::default())
}

fn run_worker_with(
    device: &FakeDevice,
    socket: Option<PathBuf>,
    timeout: Duration,
    jobs: Vec<Job>,
    capture: CaptureSet,
    arg_sizes: ArgSizes,
) -> (Lifecycle, Goodbye) {
    run_worker_staging(device, socket, timeout, jobs, capture, arg_sizes, 0)
}

fn run_worker_staging(
    device: &FakeDevice,
    socket: Option<PathBuf>,
    timeout: Duration,
    jobs: Vec<Job>,
    capture: CaptureSet,
    arg_sizes: ArgSizes,
    staging_bytes: u64,
) -> (Lifecycle, Goodbye) {
    let (tx, rx) = unbounded();
    let matched = jobs.iter().map(|j| j.index + 1).max().unwrap_or(0);
    for j in jobs {
        tx.send(WorkerMessage::Job(j)).unwrap();
    }
    let (finished, done) = crossbeam_channel::bounded(1);
    let goodbye = Goodbye {
        dispatched: vec![(reduce_sum().name.clone(), 1)],
        matched,
    };
    tx.send(WorkerMessage::Shutdown {
        goodbye: goodbye.clone(),
        finished,
    })
    .unwrap();
    let lifecycle = Lifecycle::capturing();
    run(
        device,
        rx,
        WorkerConfig {
            socket,
            hello: hello(),
            timeout,
            choice: ArgumentChoice {
                capture,
                arg_sizes,
                interior_outputs_before: false,
            },
            dispatch: ditto_protocol::DispatchSelection::All,
            staging_bytes,
            // SAFETY: getuid cannot fail.
            collector_uid: unsafe { libc::getuid() },
        },
        &lifecycle,
    );
    done.try_recv().expect("shutdown acknowledged");
    (lifecycle, goodbye)
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
    let (lifecycle, _) = run_worker_capturing(
        &device,
        Some(socket),
        Duration::from_secs(5),
        vec![job_with_inputs(0, &input, &output)],
        capture,
    );
    let got = collector.join().unwrap();
    assert!(!lifecycle.has_failed());
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
    let (lifecycle, _) = run_worker_capturing(
        &device,
        Some(socket),
        Duration::from_millis(300),
        vec![job_with_inputs(0, &input, &output)],
        CaptureSet::parse("inputs,outputs").unwrap(),
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(lifecycle.has_failed());
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
        let d = loop {
            match read_frame(&mut s).unwrap() {
                ToolMessage::Dispatch(d) => break d,
                ToolMessage::Missed(_) => continue,
                other => panic!("expected Dispatch, got {other:?}"),
            }
        };
        // Answered unless every buffer is staged, as the collector does.
        if d.needs_ack() {
            let ack = CollectorMessage::Ack(Ack {
                index: d.index,
                result: Ok(()),
            });
            write_frame(&mut s, &ack).unwrap();
        }
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
        let (d, fds) = loop {
            match ditto_protocol::read_frame_with_fds(&s).unwrap() {
                (ToolMessage::Dispatch(d), fds) => break (d, fds),
                (ToolMessage::Missed(_), _) => continue,
                (other, _) => panic!("expected Dispatch, got {other:?}"),
            }
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
    let (lifecycle, _) = run_worker_capturing(
        &device,
        Some(dir.path().join("no-collector.sock")),
        Duration::from_millis(200),
        vec![job_with_inputs(0, &input, &output)],
        CaptureSet::parse("all").unwrap(),
    );
    assert!(lifecycle.has_failed());
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
    let (lifecycle, _) = run_worker(
        &device,
        Some(dir.path().join("no-collector.sock")),
        Duration::from_millis(200),
        vec![job(0, 1, &input, &output), job(1, 1, &input, &output)],
    );
    assert!(lifecycle.has_failed());
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
    let (lifecycle, goodbye) = run_worker(
        &device,
        Some(socket),
        Duration::from_secs(5),
        vec![job(0, 1, &input, &output)],
    );
    let (h, d, released_before_ack, g) = collector.join().unwrap();

    assert_eq!(h.kernel_query, "reduce_sum");
    assert!(!lifecycle.has_failed());
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
            handle: output_base.to_le_bytes().repeat(4),
            owner_node: None,
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
    let (lifecycle, _) = run_worker(
        &device,
        Some(socket),
        Duration::from_secs(5),
        vec![first, second],
    );
    let captured = collector.join().unwrap();

    assert!(!lifecycle.has_failed());
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
    let (lifecycle, _) = run_worker(
        &device,
        Some(socket),
        Duration::from_millis(300),
        vec![job(0, 1, &input, &output), job(1, 1, &input, &output)],
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(lifecycle.has_failed());
    assert_eq!(
        device.events(),
        vec!["wait 100", "release 101", "release 103"]
    );
    collector.join().unwrap();
}

/// A collector that acknowledges every Dispatch of one tool until it hangs up.
fn ack_every_dispatch(listener: UnixListener) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let (mut s, _) = accept_and_welcome(&listener);
        loop {
            let d = match read_frame::<_, ToolMessage>(&mut s) {
                Ok(ToolMessage::Dispatch(d)) => d,
                // The input is in no allocation: reported missed, not an error.
                Ok(ToolMessage::Missed(_)) => continue,
                _ => break,
            };
            write_frame(
                &mut s,
                &CollectorMessage::Ack(Ack {
                    index: d.index,
                    result: Ok(()),
                }),
            )
            .unwrap();
        }
    })
}

#[test]
fn a_pair_is_recycled_only_after_a_later_dispatch_on_its_queue_completed() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let collector = ack_every_dispatch(listener);
    let device = FakeDevice::default();
    let (input, output) = (vec![1.0f32; 16], vec![0.0f32; 4]);
    // Jobs 0 and 2 on queue 1, job 1 on queue 2.
    let jobs = vec![
        job(0, 1, &input, &output),
        job(1, 2, &input, &output),
        job(2, 1, &input, &output),
    ];
    let (lifecycle, _) = run_worker(&device, Some(socket), Duration::from_secs(5), jobs);
    collector.join().unwrap();
    assert!(!lifecycle.has_failed());
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
        // No Dispatch arrives: the worker gave up before sending; it
        // reports both dispatches missed, then says Goodbye.
        let mut messages = Vec::new();
        while let Ok(m) = read_frame::<_, ToolMessage>(&mut s) {
            messages.push(m);
        }
        messages
    });
    let device = FakeDevice {
        panic_on_export: true,
        ..FakeDevice::default()
    };
    let (input, output) = (vec![1.0f32; 16], vec![0.0f32; 4]);
    device.allocations.insert(output.as_ptr() as u64, 16);
    let (lifecycle, _) = run_worker(
        &device,
        Some(socket),
        Duration::from_secs(5),
        vec![job(0, 1, &input, &output), job(1, 1, &input, &output)],
    );
    assert!(lifecycle.has_failed());
    assert_eq!(
        device.events(),
        vec!["wait 100", "release 101", "release 103"],
        "the job that panicked is released, the next one without waiting"
    );
    let messages = collector.join().unwrap();
    let missed: Vec<(u64, u64, ditto_protocol::MissReason)> = messages
        .iter()
        .filter_map(|m| match m {
            ToolMessage::Missed(m) => Some((m.index, m.count, m.reason)),
            _ => None,
        })
        .collect();
    assert_eq!(
        missed,
        vec![
            (0, 1, ditto_protocol::MissReason::Error),
            (1, 1, ditto_protocol::MissReason::Error)
        ],
        "{messages:?}"
    );
    assert!(matches!(messages.last(), Some(ToolMessage::Goodbye(_))));
    assert!(
        !messages
            .iter()
            .any(|m| matches!(m, ToolMessage::Dispatch(_))),
        "no partial Dispatch"
    );
}

#[test]
fn only_the_oldest_held_dispatch_of_each_queue_is_waited_on() {
    // Jobs 0, 1, 2 on queue 1 and job 3 on queue 2; job 0 completes only
    // once job 3 is released. Jobs 1 and 2 sit behind job 0's held barrier
    // and are looked at only after it is released.
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let collector = thread::spawn(move || {
        let (mut s, _) = accept_and_welcome(&listener);
        let mut indices = Vec::new();
        loop {
            match read_frame::<_, ToolMessage>(&mut s) {
                Ok(ToolMessage::Dispatch(d)) => {
                    indices.push(d.index);
                    write_frame(
                        &mut s,
                        &CollectorMessage::Ack(Ack {
                            index: d.index,
                            result: Ok(()),
                        }),
                    )
                    .unwrap();
                }
                // Buffers the fake device knows no allocation for.
                Ok(ToolMessage::Missed(_)) => {}
                _ => break,
            }
        }
        indices
    });
    let (input, output) = (vec![1.0f32; 16], vec![0.0f32; 4]);
    let jobs = vec![
        job(0, 1, &input, &output),
        job(1, 1, &input, &output),
        job(2, 1, &input, &output),
        job(3, 2, &input, &output),
    ];
    let mut device = FakeDevice::default();
    device
        .completes_after_release
        .insert(jobs[0].held.done, jobs[3].held.hold);
    let (lifecycle, _) = run_worker(&device, Some(socket), Duration::from_secs(5), jobs);
    let captured = collector.join().unwrap();
    assert!(!lifecycle.has_failed());
    assert_eq!(captured, vec![3, 0, 1, 2]);
    assert_eq!(
        device.events(),
        vec![
            "wait 100",
            "wait 106",
            "release 107",
            "wait 100",
            "release 101",
            "wait 102",
            "recycle 100",
            "release 103",
            "wait 104",
            "recycle 102",
            "release 105"
        ],
        "jobs 1 and 2 (signals 102, 104) are never looked at while job 0 is held"
    );
}

/// A collector that never answers: it reads the staging file that comes
/// after the Welcome, then every frame up to the Goodbye, and returns the
/// dispatches with the staging file's bytes.
fn collect_without_answering(
    listener: UnixListener,
) -> thread::JoinHandle<(Vec<Dispatch>, Vec<u8>)> {
    thread::spawn(move || {
        let (s, _) = accept_and_welcome(&listener);
        let (ToolMessage::Staging { size }, mut fds) =
            ditto_protocol::read_frame_with_fds(&s).unwrap()
        else {
            panic!("expected Staging first")
        };
        assert_eq!(fds.len(), 1, "the staging file travels with its message");
        let mut dispatches = Vec::new();
        loop {
            match ditto_protocol::read_frame_with_fds(&s).unwrap() {
                (ToolMessage::Dispatch(d), _) => dispatches.push(d),
                (ToolMessage::Missed(_), _) => continue,
                (ToolMessage::Goodbye(_), _) => break,
                (other, _) => panic!("unexpected {other:?}"),
            }
        }
        let file = std::fs::File::from(fds.pop().unwrap());
        assert_eq!(file.metadata().unwrap().len(), size);
        let mut bytes = vec![0u8; size as usize];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut bytes, 0).unwrap();
        (dispatches, bytes)
    })
}

#[test]
fn small_buffers_are_staged_and_their_dispatches_released_without_waiting_for_the_collector() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let collector = collect_without_answering(UnixListener::bind(&socket).unwrap());
    let input = vec![1.0f32; 4];
    let first = vec![0.0f32, 0.0, 5.0, 6.0];
    let second = vec![0.0f32, 0.0, 7.0, 8.0, 9.0];
    let device = FakeDevice::default();
    device.allocations.insert(first.as_ptr() as u64, 16);
    device.allocations.insert(second.as_ptr() as u64, 20);
    // The collector never acks: waiting for an Ack would time out.
    let (lifecycle, _) = run_worker_staging(
        &device,
        Some(socket),
        Duration::from_millis(1500),
        vec![job(0, 1, &input, &first), job(1, 1, &input, &second)],
        CaptureSet::default(),
        ArgSizes::default(),
        1 << 16,
    );
    assert!(!lifecycle.has_failed(), "nothing waited for an Ack");
    assert_eq!(
        device.events(),
        vec![
            "wait 100",
            "release 101",
            "wait 102",
            "recycle 100",
            "release 103"
        ]
    );
    let (dispatches, staged) = collector.join().unwrap();
    let floats = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let expected = [floats(&[5.0, 6.0]), floats(&[7.0, 8.0, 9.0])];
    assert_eq!(dispatches.len(), 2);
    let mut regions = Vec::new();
    for (d, want) in dispatches.iter().zip(&expected) {
        assert_eq!(d.buffers.len(), 1);
        let b = &d.buffers[0];
        let Transport::Staged { at } = b.transport else {
            panic!("dispatch {} travelled as {:?}", d.index, b.transport)
        };
        assert_eq!((b.offset, b.extent), (8, want.len() as u64));
        let got = &staged[at as usize..(at + b.extent) as usize];
        assert_eq!(got, want.as_slice(), "dispatch {}", d.index);
        assert_eq!(b.fingerprint, ditto_protocol::fingerprint(want));
        regions.push(at);
    }
    assert_ne!(regions[0], regions[1], "two regions in use at once");
}

#[test]
fn without_a_staging_file_small_buffers_travel_by_ipc_and_wait_for_the_ack() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let collector = collect_one(UnixListener::bind(&socket).unwrap());
    let (input, output) = (vec![1.0f32; 4], vec![0.0f32, 0.0, 5.0, 6.0]);
    let device = FakeDevice::default();
    device.allocations.insert(output.as_ptr() as u64, 16);
    let (lifecycle, _) = run_worker_staging(
        &device,
        Some(socket),
        Duration::from_secs(5),
        vec![job(0, 1, &input, &output)],
        CaptureSet::default(),
        ArgSizes::default(),
        0,
    );
    assert!(!lifecycle.has_failed());
    let buffers = collector.join().unwrap();
    assert!(
        matches!(buffers[0].transport, Transport::Ipc { .. }),
        "{:?}",
        buffers[0].transport
    );
}

#[test]
fn a_destroyed_queues_last_pair_is_recycled_at_once_and_never_again() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let collector = ack_every_dispatch(UnixListener::bind(&socket).unwrap());
    let device = FakeDevice::default();
    let (input, output) = (vec![1.0f32; 16], vec![0.0f32; 4]);
    let (tx, rx) = unbounded();
    let lifecycle = Lifecycle::capturing();
    // Waits (bounded) until the device has seen `event`.
    let seen = |event: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !device.events().iter().any(|e| e == event) {
            assert!(
                std::time::Instant::now() < deadline,
                "no `{event}`: {:?}",
                device.events()
            );
            thread::sleep(Duration::from_millis(1));
        }
    };
    thread::scope(|s| {
        s.spawn(|| {
            let config = WorkerConfig {
                socket: Some(socket.clone()),
                hello: hello(),
                timeout: Duration::from_secs(5),
                choice: ArgumentChoice::default(),
                dispatch: ditto_protocol::DispatchSelection::All,
                staging_bytes: 0,
                // SAFETY: getuid cannot fail.
                collector_uid: unsafe { libc::getuid() },
            };
            run(&device, rx, config, &lifecycle)
        });
        // Job 0 on queue 7 is captured and released...
        tx.send(WorkerMessage::Job(job(0, 7, &input, &output)))
            .unwrap();
        seen("release 101");
        // ...then the application destroys queue 7: its pair comes back
        // at once, before job 1 on another queue is released...
        tx.send(WorkerMessage::QueueDestroyed { queue: 7 }).unwrap();
        tx.send(WorkerMessage::Job(job(1, 8, &input, &output)))
            .unwrap();
        seen("release 103");
        // ...and a new queue at the same address does not give it back twice.
        tx.send(WorkerMessage::Job(job(2, 7, &input, &output)))
            .unwrap();
        seen("release 105");
        let (finished, done) = crossbeam_channel::bounded(1);
        let goodbye = Goodbye {
            dispatched: vec![],
            matched: 3,
        };
        tx.send(WorkerMessage::Shutdown { goodbye, finished })
            .unwrap();
        done.recv_timeout(Duration::from_secs(10))
            .expect("shutdown acknowledged");
    });
    collector.join().unwrap();
    assert!(!lifecycle.has_failed());
    let events = device.events();
    let recycled: Vec<&String> = events.iter().filter(|e| e.starts_with("recycle")).collect();
    assert_eq!(recycled, ["recycle 100"], "{events:?}");
    let at = |e: &str| events.iter().position(|x| x == e).unwrap();
    assert!(at("recycle 100") < at("release 103"), "{events:?}");
}

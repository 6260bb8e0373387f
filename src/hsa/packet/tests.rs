//! The packet callback's tests: fake table entries and a fake writer
//! record what the rewrite wrote, in which calls, and what it queued.

use super::*;
use crate::capture::kernel_table::KernelInfo;
use crate::hsa::worker::HeldSignals;
use crate::lifecycle::Lifecycle;
use crate::options::Options;
use crossbeam_channel::Receiver;
use std::cell::RefCell;

const SCALE_OBJECT: u64 = 0xaa00;
const VECTOR_ADD_OBJECT: u64 = 0xbb00;

thread_local! {
    static WRITES: RefCell<Vec<(usize, Vec<AqlPacket>)>> = const { RefCell::new(Vec::new()) };
    static SIGNALS_CREATED: RefCell<u64> = const { RefCell::new(0) };
    static SIGNAL_CREATE_FAILS: RefCell<bool> = const { RefCell::new(false) };
    /// The worker's end of the job channel, watched by the writer.
    static JOBS: RefCell<Option<Receiver<WorkerMessage>>> = const { RefCell::new(None) };
    /// Jobs waiting in the channel at each writer call.
    static QUEUED_AT_WRITE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// Stores, adds and subtracts on signals, in order, with the jobs
    /// queued at each: ("store"|"add"|"subtract", signal, value, queued).
    static SIGNAL_OPS: RefCell<Vec<(&'static str, u64, i64, usize)>> = const { RefCell::new(Vec::new()) };
}

fn signal_op(op: &'static str, signal: hsa_signal_t, value: hsa_signal_value_t) {
    let queued = JOBS.with(|j| j.borrow().as_ref().map_or(0, |rx| rx.len()));
    SIGNAL_OPS.with(|o| o.borrow_mut().push((op, signal.handle, value, queued)));
}

fn signal_ops() -> Vec<(&'static str, u64, i64, usize)> {
    SIGNAL_OPS.with(|o| o.borrow().clone())
}

unsafe extern "C" fn fake_writer(pkts: *const c_void, count: u64) {
    // SAFETY: the callback passes `count` packets.
    let copied =
        unsafe { std::slice::from_raw_parts(pkts as *const AqlPacket, count as usize) }.to_vec();
    WRITES.with(|w| w.borrow_mut().push((pkts as usize, copied)));
    let queued = JOBS.with(|j| j.borrow().as_ref().map_or(0, |rx| rx.len()));
    QUEUED_AT_WRITE.with(|q| q.borrow_mut().push(queued));
}

unsafe extern "C" fn fake_signal_create(
    _value: hsa_signal_value_t,
    _n: u32,
    _consumers: *const hsa_agent_t,
    signal: *mut hsa_signal_t,
) -> hsa_status_t {
    if SIGNAL_CREATE_FAILS.with(|f| *f.borrow()) {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    let n = SIGNALS_CREATED.with(|c| {
        *c.borrow_mut() += 1;
        *c.borrow()
    });
    // SAFETY: valid out-pointer from the caller.
    unsafe { (*signal).handle = 1000 + n };
    HSA_STATUS_SUCCESS
}

unsafe extern "C" fn fake_signal_store(signal: hsa_signal_t, value: hsa_signal_value_t) {
    signal_op("store", signal, value);
}

unsafe extern "C" fn fake_signal_add(signal: hsa_signal_t, value: hsa_signal_value_t) {
    signal_op("add", signal, value);
}

unsafe extern "C" fn fake_signal_subtract(signal: hsa_signal_t, value: hsa_signal_value_t) {
    signal_op("subtract", signal, value);
}

/// A tool over fake table entries, with scale_values<float> (target)
/// and vector_add (not) loaded; leaked as the runtime's would be.
fn fake_tool() -> (&'static HsaTool, Receiver<WorkerMessage>) {
    fake_tool_with(&[])
}

/// The same, with more DITTO_* variables set.
fn fake_tool_with(vars: &[(&str, &str)]) -> (&'static HsaTool, Receiver<WorkerMessage>) {
    // SAFETY: all-zero tables are valid (every entry None).
    let mut core: CoreApiTable = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let amd: AmdExtTable = unsafe { std::mem::zeroed() };
    core.hsa_signal_create_fn = Some(fake_signal_create);
    core.hsa_signal_store_screlease_fn = Some(fake_signal_store);
    core.hsa_signal_store_relaxed_fn = Some(fake_signal_store);
    core.hsa_signal_add_screlease_fn = Some(fake_signal_add);
    core.hsa_signal_subtract_screlease_fn = Some(fake_signal_subtract);
    // Unless a test says otherwise, no before-images of outputs whose
    // allocations are unknown yet: the two-packet rewrite.
    let options = Options::from_lookup(|k| match k {
        "DITTO_KERNEL" => Some("scale_values".to_string()),
        _ => vars
            .iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.to_string())
            .or_else(|| (k == "DITTO_SUBALLOCATION_WRITES").then(|| "0".to_string())),
    });
    assert!(options.fatal.is_none());
    let lifecycle = Box::leak(Box::new(Lifecycle::capturing()));
    let (tool, rx) = HsaTool::new(options, core, amd, 1_000_000_000, lifecycle);
    let tool: &'static HsaTool = Box::leak(Box::new(tool));
    let query = tool.options.kernel.as_deref();
    tool.kernels.insert(
        SCALE_OBJECT,
        KernelInfo::new("_Z12scale_valuesIfEvPT_S1_S0_i.kd", 24, query, None).0,
    );
    tool.kernels.insert(
        VECTOR_ADD_OBJECT,
        KernelInfo::new("_Z10vector_addPKfS0_Pfi.kd", 28, query, None).0,
    );
    WRITES.with(|w| w.borrow_mut().clear());
    SIGNALS_CREATED.with(|c| *c.borrow_mut() = 0);
    SIGNAL_CREATE_FAILS.with(|f| *f.borrow_mut() = false);
    JOBS.with(|j| *j.borrow_mut() = Some(rx.clone()));
    QUEUED_AT_WRITE.with(|q| q.borrow_mut().clear());
    (tool, rx)
}

fn context(tool: &'static HsaTool) -> &'static QueueContext {
    Box::leak(Box::new(QueueContext {
        tool,
        queue: 0x5150,
        agent: 0x6a,
    }))
}

fn dispatch_packet(kernel_object: u64, kernarg: *mut u8, completion: u64) -> AqlPacket {
    let mut d = hsa_kernel_dispatch_packet_t {
        header: header(HSA_PACKET_TYPE_KERNEL_DISPATCH, false),
        setup: 1,
        workgroup_size_x: 256,
        workgroup_size_y: 1,
        workgroup_size_z: 1,
        grid_size_x: 1024,
        grid_size_y: 1,
        grid_size_z: 1,
        kernel_object,
        kernarg_address: kernarg as *mut c_void,
        ..Default::default()
    };
    d.completion_signal = hsa_signal_t { handle: completion };
    AqlPacket::from_dispatch(&d)
}

fn call(ctx: &QueueContext, packets: &[AqlPacket]) {
    // SAFETY: `packets` are live for the call; ctx outlives it.
    unsafe {
        on_packets(
            packets.as_ptr() as *const c_void,
            packets.len() as u64,
            0,
            ctx as *const QueueContext as *mut c_void,
            Some(fake_writer),
        )
    };
}

fn writes() -> Vec<(usize, Vec<AqlPacket>)> {
    WRITES.with(|w| w.borrow().clone())
}

#[test]
fn a_kernel_s_dispatches_are_held_before_they_start_until_its_outputs_proved_whole() {
    // Issue 23, item 1: an output inside a larger allocation needs its
    // image before the kernel, which only the rewrite can arrange.
    let (tool, rx) = fake_tool_with(&[("DITTO_SUBALLOCATION_WRITES", "1")]);
    let ctx = context(tool);
    let mut kernarg = [0u8; 24];
    let kernarg = kernarg.as_mut_ptr();
    let dispatch = || dispatch_packet(SCALE_OBJECT, kernarg, 77);
    let kernel = tool.kernels.lookup(SCALE_OBJECT).unwrap();
    call(ctx, &[dispatch()]);
    assert_eq!(
        writes()[0].1.len(),
        5,
        "drain, gate, dispatch, ended, hold: outputs unknown"
    );
    // A described dispatch whose outputs were whole allocations.
    kernel.learn_outputs(false);
    call(ctx, &[dispatch()]);
    assert_eq!(writes()[1].1.len(), 3, "dispatch, ended and hold only");
    // One interior output, and every later dispatch is held before again.
    kernel.learn_outputs(true);
    kernel.learn_outputs(false);
    call(ctx, &[dispatch()]);
    assert_eq!(writes()[2].1.len(), 5, "an interior output is remembered");
    drop(rx);
}

#[test]
fn an_agent_scope_release_of_the_target_is_raised_to_system_and_nothing_else_changes() {
    // Issue 19: HIP's default header (AMD_OPT_FLUSH=1) acquires and
    // releases at AGENT scope, with the barrier bit; only the release
    // scope may change, the rest is the application's.
    let (tool, _rx) = fake_tool();
    let ctx = context(tool);
    let mut kernarg = [0u8; 24];
    let mut original = dispatch_packet(SCALE_OBJECT, kernarg.as_mut_ptr(), 77).as_dispatch();
    original.header = (HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE)
        | (1 << HSA_PACKET_HEADER_BARRIER)
        | (HSA_FENCE_SCOPE_AGENT << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE)
        | (HSA_FENCE_SCOPE_AGENT << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
    call(ctx, &[AqlPacket::from_dispatch(&original)]);
    let d = writes()[0].1[0].as_dispatch();
    assert_eq!(
        d.header,
        (HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE)
            | (1 << HSA_PACKET_HEADER_BARRIER)
            | (HSA_FENCE_SCOPE_AGENT << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE)
            | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE),
        "{:#06x}",
        d.header
    );
    assert_eq!(release_scope(d.header), HSA_FENCE_SCOPE_SYSTEM);
}

#[test]
fn a_target_keeps_its_signal_raised_by_one_then_a_barrier_signals_done_then_the_hold() {
    let (tool, rx) = fake_tool();
    let ctx = context(tool);
    let mut kernarg = [0u8; 24];
    kernarg[0..8].copy_from_slice(&0x1111_0000u64.to_le_bytes());
    kernarg[8..16].copy_from_slice(&0x2222_0000u64.to_le_bytes());
    kernarg[16..20].copy_from_slice(&2.0f32.to_le_bytes());
    kernarg[20..24].copy_from_slice(&1024i32.to_le_bytes());
    let original = dispatch_packet(SCALE_OBJECT, kernarg.as_mut_ptr(), 77);
    JOBS.with(|j| *j.borrow_mut() = Some(rx.clone()));
    call(ctx, &[original]);
    // The app may reuse its kernarg memory at once: the job must hold a copy.
    let submitted = kernarg;
    kernarg.fill(0xee);

    let w = writes();
    assert_eq!(w.len(), 1, "one writer call");
    let packets = &w[0].1;
    assert_eq!(
        packets.len(),
        3,
        "the dispatch, a barrier for done, the hold"
    );
    let (d, ended, hold) = (
        packets[0].as_dispatch(),
        packets[1].as_barrier(),
        packets[2].as_barrier(),
    );
    // The app's signal went up by 1 before the job was queued (a worker
    // already gone releases the job at once, taking the 1 back).
    assert_eq!(signal_ops(), vec![("add", 77, 1, 0)]);
    assert_eq!(QUEUED_AT_WRITE.with(|q| q.borrow().clone()), vec![1]);
    JOBS.with(|j| *j.borrow_mut() = None);
    let job = match rx.try_recv().expect("a job for the worker") {
        WorkerMessage::Job(job) => job,
        _ => panic!("unexpected message"),
    };
    assert_eq!(
        (job.queue, job.agent),
        (0x5150, 0x6a),
        "the queue's own agent"
    );
    assert_eq!(job.held.app, 77);
    let mut expected = original.as_dispatch();
    expected.header = with_system_release(expected.header);
    assert_eq!(
        packets[0].0,
        AqlPacket::from_dispatch(&expected).0,
        "only the release scope changes: the kernel's times land in the app's signal"
    );
    assert_eq!(release_scope(d.header), HSA_FENCE_SCOPE_SYSTEM);
    assert_eq!(packet_type(ended.header), HSA_PACKET_TYPE_BARRIER_AND);
    assert!(has_barrier(ended.header), "waits for the kernel");
    assert!(ended.dep_signal.iter().all(|s| s.handle == 0));
    assert_eq!(ended.completion_signal.handle, job.held.done);
    assert_eq!(packet_type(hold.header), HSA_PACKET_TYPE_BARRIER_AND);
    assert!(has_barrier(hold.header));
    assert_eq!(hold.dep_signal[0].handle, job.held.hold);
    assert!(hold.dep_signal[1..].iter().all(|s| s.handle == 0));
    assert_eq!(hold.completion_signal.handle, 0);
    assert_ne!(job.held.done, job.held.hold);
    assert_eq!(job.kernarg, submitted.to_vec());
    assert_eq!(
        (job.index, job.grid, job.block, job.queue),
        (0, [1024, 1, 1], [256, 1, 1], 0x5150)
    );
    assert_eq!(job.kernel.dispatches(), 1);
    assert_eq!(SIGNALS_CREATED.with(|c| *c.borrow()), 2);

    // The release lets the hold go, then takes the 1 back.
    tool.release(&job.held);
    assert_eq!(
        signal_ops()[1..],
        [("store", job.held.hold, 0, 0), ("subtract", 77, 1, 0)]
    );
}

#[test]
fn target_dispatch_without_app_signal_signals_done_itself_before_the_hold() {
    let (tool, rx) = fake_tool();
    let mut kernarg = [0u8; 28];
    call(
        context(tool),
        &[dispatch_packet(SCALE_OBJECT, kernarg.as_mut_ptr(), 0)],
    );
    let packets = &writes()[0].1;
    assert_eq!(packets.len(), 2, "the dispatch and the hold");
    let Ok(WorkerMessage::Job(job)) = rx.try_recv() else {
        panic!("no job")
    };
    assert_eq!((job.index, job.held.app), (0, 0));
    assert_eq!(
        packets[0].as_dispatch().completion_signal.handle,
        job.held.done
    );
    assert_eq!(packets[1].as_barrier().dep_signal[0].handle, job.held.hold);
    assert_eq!(packets[1].as_barrier().completion_signal.handle, 0);
    assert!(signal_ops().is_empty(), "{:?}", signal_ops());
    tool.release(&job.held);
    assert_eq!(signal_ops(), vec![("store", job.held.hold, 0, 0)]);
}

#[test]
fn non_target_packets_reach_the_writer_unchanged_without_signal_or_job() {
    let (tool, rx) = fake_tool();
    let ctx = context(tool);
    let mut kernarg = [7u8; 28];
    let dispatch = dispatch_packet(VECTOR_ADD_OBJECT, kernarg.as_mut_ptr(), 55);
    let barrier = AqlPacket::from_barrier(&hsa_barrier_and_packet_t {
        header: header(HSA_PACKET_TYPE_BARRIER_AND, true),
        completion_signal: hsa_signal_t { handle: 99 },
        ..Default::default()
    });
    let unknown_kernel = dispatch_packet(0xdead, kernarg.as_mut_ptr(), 0);
    for packet in [dispatch, barrier, unknown_kernel] {
        let slot = [packet];
        WRITES.with(|w| w.borrow_mut().clear());
        call(ctx, &slot);
        let w = writes();
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].0, slot.as_ptr() as usize, "forwarded in place");
        assert_eq!(w[0].1.len(), 1);
        assert_eq!(w[0].1[0].0, packet.0, "byte for byte");
    }
    assert_eq!(SIGNALS_CREATED.with(|c| *c.borrow()), 0);
    assert!(rx.try_recv().is_err(), "no job");
    assert_eq!(
        tool.kernels.get(VECTOR_ADD_OBJECT).unwrap().dispatches(),
        1,
        "still counted"
    );
}

#[test]
fn mixed_batch_forwards_runs_around_the_rewritten_target() {
    let (tool, rx) = fake_tool();
    let mut kernarg = [0u8; 28];
    let other = dispatch_packet(VECTOR_ADD_OBJECT, kernarg.as_mut_ptr(), 0);
    let target = dispatch_packet(SCALE_OBJECT, kernarg.as_mut_ptr(), 0);
    let batch = [other, target, other];
    call(context(tool), &batch);
    let sizes: Vec<usize> = writes().iter().map(|(_, p)| p.len()).collect();
    assert_eq!(sizes, vec![1, 2, 1]);
    assert!(matches!(rx.try_recv(), Ok(WorkerMessage::Job(_))));
    assert!(rx.try_recv().is_err());
}

#[test]
fn target_passes_untouched_once_capture_has_failed_open() {
    let (tool, rx) = fake_tool();
    tool.lifecycle.fail("the test stopped capture");
    let mut kernarg = [0u8; 28];
    let packet = dispatch_packet(SCALE_OBJECT, kernarg.as_mut_ptr(), 5);
    call(context(tool), &[packet]);
    let w = writes();
    assert_eq!((w.len(), w[0].1.len()), (1, 1));
    assert_eq!(w[0].1[0].0, packet.0);
    assert!(rx.try_recv().is_err());
    assert_eq!(tool.kernels.get(SCALE_OBJECT).unwrap().dispatches(), 1);
    assert_eq!(
        tool.matched_dispatches(),
        1,
        "it still takes its index, to be accounted for at the end"
    );
}

#[test]
fn target_passes_untouched_when_signals_cannot_be_created() {
    let (tool, rx) = fake_tool();
    SIGNAL_CREATE_FAILS.with(|f| *f.borrow_mut() = true);
    let mut kernarg = [0u8; 28];
    let packet = dispatch_packet(SCALE_OBJECT, kernarg.as_mut_ptr(), 5);
    call(context(tool), &[packet]);
    let w = writes();
    assert_eq!((w.len(), w[0].1[0].0), (1, packet.0));
    assert!(matches!(
        rx.try_recv(),
        Ok(WorkerMessage::Missed { index: 0, .. })
    ));
    assert!(rx.try_recv().is_err());
}

#[test]
fn recycled_pair_is_reused_instead_of_creating_signals() {
    use crate::hsa::worker::HeldBarrier;
    let (tool, rx) = fake_tool();
    tool.recycle(HeldBarrier {
        done: 1,
        hold: 2,
        pre: None,
        app: 0,
    });
    let mut kernarg = [0u8; 28];
    call(
        context(tool),
        &[dispatch_packet(SCALE_OBJECT, kernarg.as_mut_ptr(), 0)],
    );
    let Ok(WorkerMessage::Job(job)) = rx.try_recv() else {
        panic!("no job")
    };
    assert_eq!(
        job.held,
        HeldBarrier {
            done: 1,
            hold: 2,
            pre: None,
            app: 0,
        }
    );
    assert_eq!(SIGNALS_CREATED.with(|c| *c.borrow()), 0);
}
#[test]
fn the_job_is_queued_before_the_rewrite_is_written() {
    let (tool, rx) = fake_tool();
    let mut kernarg = [0u8; 24];
    call(
        context(tool),
        &[dispatch_packet(SCALE_OBJECT, kernarg.as_mut_ptr(), 0)],
    );
    assert_eq!(writes()[0].1.len(), 2);
    assert_eq!(
        QUEUED_AT_WRITE.with(|q| q.borrow().clone()),
        vec![1],
        "the job that releases the barrier exists before the barrier does"
    );
    assert!(matches!(rx.try_recv(), Ok(WorkerMessage::Job(_))));
}

#[test]
fn a_target_dispatch_that_cannot_be_held_still_uses_up_its_index() {
    let (tool, rx) = fake_tool();
    let mut kernarg = [0u8; 24];
    SIGNAL_CREATE_FAILS.with(|f| *f.borrow_mut() = true);
    call(
        context(tool),
        &[dispatch_packet(SCALE_OBJECT, kernarg.as_mut_ptr(), 0)],
    );
    assert!(
        matches!(
            rx.try_recv(),
            Ok(WorkerMessage::Missed {
                index: 0,
                reason: ditto_protocol::MissReason::Error,
                ..
            })
        ),
        "the first passed uncaptured and is reported missed"
    );
    SIGNAL_CREATE_FAILS.with(|f| *f.borrow_mut() = false);
    call(
        context(tool),
        &[dispatch_packet(SCALE_OBJECT, kernarg.as_mut_ptr(), 0)],
    );
    let Ok(WorkerMessage::Job(job)) = rx.try_recv() else {
        panic!("no job")
    };
    assert_eq!(job.index, 1, "the second dispatch keeps its own index");
}

#[test]
fn unselected_target_dispatches_pass_in_place_and_keep_the_real_indices() {
    let (tool, rx) = fake_tool_with(&[("DITTO_DISPATCH", "1,3")]);
    let ctx = context(tool);
    let mut kernarg = [0u8; 24];
    let other = dispatch_packet(VECTOR_ADD_OBJECT, kernarg.as_mut_ptr(), 0);
    let target = dispatch_packet(SCALE_OBJECT, kernarg.as_mut_ptr(), 9);
    // Dispatch 0 alone: forwarded in place, nothing held.
    let first = [target];
    call(ctx, &first);
    let w = writes();
    assert_eq!(w.len(), 1);
    assert_eq!(
        (w[0].0, w[0].1.len(), w[0].1[0].0),
        (first.as_ptr() as usize, 1, target.0)
    );
    assert!(rx.try_recv().is_err(), "no job for an unselected dispatch");
    assert_eq!(SIGNALS_CREATED.with(|c| *c.borrow()), 0, "no signal");
    // Dispatches 1, 2, 3 in one batch with a non-target in between.
    WRITES.with(|w| w.borrow_mut().clear());
    call(ctx, &[target, other, target, target]);
    let sizes: Vec<usize> = writes().iter().map(|(_, p)| p.len()).collect();
    assert_eq!(
        sizes,
        vec![3, 2, 3],
        "held 1; [other, unselected 2] as one run; held 3"
    );
    assert_eq!(writes()[1].1[1].0, target.0, "dispatch 2 untouched");
    let indices: Vec<u64> = rx
        .try_iter()
        .map(|m| match m {
            WorkerMessage::Job(j) => j.index,
            _ => panic!("unexpected message"),
        })
        .collect();
    assert_eq!(indices, vec![1, 3]);
    assert_eq!(tool.kernels.get(SCALE_OBJECT).unwrap().dispatches(), 4);
}

#[test]
fn with_inputs_a_target_becomes_drain_gate_dispatch_ended_hold_in_one_write() {
    let (tool, rx) = fake_tool_with(&[("DITTO_CAPTURE", "inputs,outputs")]);
    let mut kernarg = [0u8; 24];
    let original = dispatch_packet(SCALE_OBJECT, kernarg.as_mut_ptr(), 77);
    call(context(tool), &[original]);
    let w = writes();
    assert_eq!(w.len(), 1, "one writer call");
    let p = &w[0].1;
    assert_eq!(p.len(), 5);
    let Ok(WorkerMessage::Job(job)) = rx.try_recv() else {
        panic!("no job")
    };
    let pre = job.held.pre.expect("inputs are held");
    let (drain, gate, d, ended, hold) = (
        p[0].as_barrier(),
        p[1].as_barrier(),
        p[2].as_dispatch(),
        p[3].as_barrier(),
        p[4].as_barrier(),
    );
    assert_eq!(packet_type(drain.header), HSA_PACKET_TYPE_BARRIER_AND);
    assert!(has_barrier(drain.header), "waits for all earlier work");
    assert!(drain.dep_signal.iter().all(|s| s.handle == 0));
    assert_eq!(drain.completion_signal.handle, pre.pre);
    assert_eq!(packet_type(gate.header), HSA_PACKET_TYPE_BARRIER_AND);
    assert_eq!(gate.dep_signal[0].handle, pre.hold_pre);
    assert_eq!(gate.completion_signal.handle, 0);
    assert_eq!(d.completion_signal.handle, 77);
    assert_eq!(d.kernel_object, SCALE_OBJECT);
    assert_eq!(ended.completion_signal.handle, job.held.done);
    assert_eq!(hold.dep_signal[0].handle, job.held.hold);
    assert_eq!(hold.completion_signal.handle, 0);
    let mut all = vec![pre.pre, pre.hold_pre, job.held.done, job.held.hold];
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 4, "four distinct signals");
    assert_eq!(SIGNALS_CREATED.with(|c| *c.borrow()), 4);
}

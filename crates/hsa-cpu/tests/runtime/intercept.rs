//! Intercept queues: reachable through the table only, run on the doorbell
//! thread, chain with the last registered outermost, expand packets, and
//! overflow into the async retry path when the hardware ring is full (ROCr's
//! InterceptQueue); the writer works only on the callback's thread; a
//! swapped completion signal takes the dispatch times.

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
use std::ffi::c_void;
use std::sync::Mutex;
use std::time::Duration;

/// The AMD table as a tool reads it: by name, in the layout its version
/// picks (the runtime serves ROCm 7.2's by default).
fn amd_table() -> AmdExtTable {
    // SAFETY: the root table and its AMD table live for the whole process.
    unsafe {
        let amd = (*rt::api::root_table()).amd_ext_ as *mut u8;
        hsa::versions::LiveTable::new(hsa::versions::Table::AmdExt, amd)
            .expect("a known layout")
            .amd_ext()
    }
}

fn intercept_queue(size: u32) -> *mut hsa_queue_t {
    init();
    let create = amd_table()
        .hsa_amd_queue_intercept_create_fn
        .expect("intercept_create in the table");
    let mut q = std::ptr::null_mut();
    // SAFETY: valid out pointer.
    let s = unsafe {
        create(
            gpu(),
            size,
            HSA_QUEUE_TYPE_MULTI,
            None,
            std::ptr::null_mut(),
            0,
            0,
            &mut q,
        )
    };
    assert_eq!(s, 0);
    q
}

fn register(q: *mut hsa_queue_t, handler: InterceptHandler, data: *mut c_void) {
    let reg = amd_table()
        .hsa_amd_queue_intercept_register_fn
        .expect("intercept_register in the table");
    // SAFETY: q is an intercept queue.
    assert_eq!(unsafe { reg(q, handler, data) }, 0);
}

/// What the expanding interceptor saw: (count, user index, thread name).
struct Expander {
    calls: Mutex<Vec<(u64, u64, String)>>,
}

/// Dispatches of `record` with id N become three (ids 10N, 10N+1, 10N+2),
/// written in two writer calls (1 then 2); barrier packets pass unchanged.
unsafe extern "C" fn expand(
    pkts: *const c_void,
    count: u64,
    index: u64,
    data: *mut c_void,
    writer: InterceptPacketWriter,
) {
    // SAFETY: data is the Expander; pkts holds `count` packets (1 for the outermost).
    unsafe {
        let me = &*(data as *const Expander);
        me.calls.lock().unwrap().push((
            count,
            index,
            std::thread::current().name().unwrap_or("").to_string(),
        ));
        let writer = writer.unwrap();
        let p = *(pkts as *const AqlPacket);
        if packet::packet_type(p.header()) != HSA_PACKET_TYPE_KERNEL_DISPATCH {
            writer(pkts, 1);
            return;
        }
        let d = p.as_dispatch();
        let args = &*(d.kernarg_address as *const RecordArgs);
        let mut out = Vec::new();
        for k in 0..3 {
            let a = Box::leak(Box::new(RecordArgs {
                log: args.log,
                count: args.count,
                id: args.id * 10 + k,
            }));
            let mut e = d;
            e.kernarg_address = a as *mut RecordArgs as *mut c_void;
            out.push(AqlPacket::from_dispatch(&e));
        }
        writer(out.as_ptr() as *const c_void, 1);
        writer(out[1..].as_ptr() as *const c_void, 2);
    }
}

#[test]
fn intercept_functions_are_in_the_table_but_not_exported() {
    let lib = std::ffi::CString::new(built_library().to_str().unwrap()).unwrap();
    // SAFETY: loading our own library without running anything from it.
    unsafe {
        let h = libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null());
        assert!(libc::dlsym(h, c"hsa_amd_queue_intercept_create".as_ptr()).is_null());
        assert!(libc::dlsym(h, c"hsa_amd_queue_intercept_register".as_ptr()).is_null());
        assert!(!libc::dlsym(h, c"hsa_queue_create".as_ptr()).is_null());
        libc::dlclose(h);
    }
    assert!(amd_table().hsa_amd_queue_intercept_create_fn.is_some());
}

#[test]
fn four_slot_queue_expanding_each_packet_into_three_overflows_and_retries_in_order() {
    let k = test_kernels();
    let record = kernel_object(k.executable, "record.kd");
    let q = intercept_queue(4);
    // SAFETY: q is live.
    assert_eq!(unsafe { (*q).size }, 4, "a real 4-slot ring");
    let expander = Box::leak(Box::new(Expander {
        calls: Mutex::new(Vec::new()),
    }));
    register(q, Some(expand), expander as *mut Expander as *mut c_void);
    let mut log = RecordLog::new();
    let hold = signal(1);
    let done = signal(1);
    let overflowed = rt::signals_and_queues::intercept_queues::overflowed_batches();
    let me = std::thread::current().name().unwrap_or("").to_string();
    // The held barrier takes 1 hardware slot; dispatch 1's first writer call
    // fits (one slot stays free), its second (2 packets) overflows.
    submit(q, &[barrier_and(&[hold], hsa_signal_t::default())]);
    submit(
        q,
        &[dispatch(
            record,
            log.kernarg(1),
            1,
            hsa_signal_t::default(),
            false,
        )],
    );
    // With the overflow pending, these doorbells only retry it; the packets
    // wait in the proxy ring (3 of its 4 slots).
    for id in 2..=3 {
        submit(
            q,
            &[dispatch(
                record,
                log.kernarg(id),
                1,
                hsa_signal_t::default(),
                false,
            )],
        );
    }
    std::thread::sleep(Duration::from_millis(30));
    assert!(log.entries().is_empty(), "held behind the barrier");
    assert!(
        rt::signals_and_queues::intercept_queues::overflowed_batches() > overflowed,
        "the overflow path was reached"
    );
    {
        let calls = expander.calls.lock().unwrap();
        assert_eq!(
            calls.iter().map(|c| (c.1, c.2.clone())).collect::<Vec<_>>(),
            [(0, me.clone()), (1, me.clone())],
            "doorbell-thread calls stop once the overflow is pending"
        );
    }
    store(hold, 0);
    // More dispatches while the retries run: the app waits for proxy room.
    for id in 4..=12 {
        submit(
            q,
            &[dispatch(
                record,
                log.kernarg(id),
                1,
                hsa_signal_t::default(),
                false,
            )],
        );
    }
    submit(q, &[barrier_and(&[], done)]);
    assert_eq!(wait_eq(done, 0), 0, "the overflow drained");
    let expected: Vec<u32> = (1..=12)
        .flat_map(|id| [id * 10, id * 10 + 1, id * 10 + 2])
        .collect();
    assert_eq!(log.entries(), expected, "order preserved across overflow");
    let calls = expander.calls.lock().unwrap();
    assert!(
        calls.iter().all(|c| c.0 == 1),
        "one packet per outermost call"
    );
    assert_eq!(
        calls.iter().map(|c| c.1).collect::<Vec<_>>(),
        (0..14).collect::<Vec<u64>>(),
        "each packet intercepted once, in order"
    );
    assert!(
        calls[2..].iter().any(|c| c.2 == "hsa-cpu-async"),
        "packets that arrived during the overflow were intercepted on the async thread: {:?}",
        calls.iter().map(|c| &c.2).collect::<Vec<_>>()
    );
    assert!(
        calls.iter().all(|c| c.2 == me || c.2 == "hsa-cpu-async"),
        "only the doorbell thread and the async thread run interceptors"
    );
    drop(calls);
    // SAFETY: q is live; the proxy ring is fully consumed.
    unsafe {
        assert_eq!(rt::hsa_queue_load_read_index_scacquire(q), 14);
        assert_eq!(rt::hsa_queue_destroy(q), 0);
    }
}

/// Calls the writer from a thread of its own: must be ignored.
unsafe extern "C" fn write_from_another_thread(
    pkts: *const c_void,
    count: u64,
    _i: u64,
    data: *mut c_void,
    writer: InterceptPacketWriter,
) {
    let (p, w) = (pkts as usize, writer.unwrap());
    // SAFETY: the writer is called with a valid packet copy; it must refuse.
    std::thread::spawn(move || {
        let copy = unsafe { *(p as *const AqlPacket) };
        unsafe { w(&copy as *const AqlPacket as *const c_void, 1) };
    })
    .join()
    .unwrap();
    // SAFETY: data counts calls.
    unsafe { *(data as *mut u32) += 1 };
    let _ = count;
}

#[test]
fn writer_called_from_another_thread_is_ignored() {
    let k = test_kernels();
    let record = kernel_object(k.executable, "record.kd");
    let q = intercept_queue(64);
    let calls = Box::leak(Box::new(0u32));
    register(
        q,
        Some(write_from_another_thread),
        calls as *mut u32 as *mut c_void,
    );
    let mut log = RecordLog::new();
    let done = signal(1);
    submit(
        q,
        &[
            dispatch(record, log.kernarg(1), 1, hsa_signal_t::default(), false),
            barrier_and(&[], done),
        ],
    );
    assert_eq!(*calls, 2, "both packets reached the interceptor");
    std::thread::sleep(Duration::from_millis(30));
    assert!(
        log.entries().is_empty(),
        "the foreign writer call submitted nothing"
    );
    assert_eq!(load(done), 1, "nor the barrier");
    // SAFETY: q is live.
    unsafe {
        assert_eq!(rt::hsa_queue_load_read_index_scacquire(q), 2);
        rt::hsa_queue_destroy(q);
    }
}

/// rocprofiler-style: swap in our completion signal, append a barrier-AND
/// that carries the application's.
unsafe extern "C" fn swap_signal(
    pkts: *const c_void,
    _count: u64,
    _i: u64,
    data: *mut c_void,
    writer: InterceptPacketWriter,
) {
    // SAFETY: data is our signal handle; pkts holds one packet.
    unsafe {
        let ours = *(data as *const hsa_signal_t);
        let p = *(pkts as *const AqlPacket);
        if packet::packet_type(p.header()) != HSA_PACKET_TYPE_KERNEL_DISPATCH {
            writer.unwrap()(pkts, 1);
            return;
        }
        let mut d = p.as_dispatch();
        let app = d.completion_signal;
        d.completion_signal = ours;
        let out = [AqlPacket::from_dispatch(&d), barrier_and(&[ours], app)];
        writer.unwrap()(out.as_ptr() as *const c_void, 2);
    }
}

#[test]
fn a_swapped_completion_signal_takes_the_dispatch_times() {
    let k = test_kernels();
    let record = kernel_object(k.executable, "record.kd");
    let q = intercept_queue(64);
    // SAFETY: q is live.
    assert_eq!(
        unsafe { rt::hsa_amd_profiling_set_profiler_enabled(q, 1) },
        0
    );
    let ours = Box::leak(Box::new(signal(1)));
    register(
        q,
        Some(swap_signal),
        ours as *mut hsa_signal_t as *mut c_void,
    );
    let mut log = RecordLog::new();
    let app = signal(1);
    let mut before = 0u64;
    // SAFETY: TIMESTAMP is a uint64_t.
    unsafe {
        rt::hsa_system_get_info(
            HSA_SYSTEM_INFO_TIMESTAMP,
            &mut before as *mut u64 as *mut c_void,
        )
    };
    submit(q, &[dispatch(record, log.kernarg(1), 1, app, true)]);
    assert_eq!(wait_eq(app, 0), 0);
    assert_eq!(load(*ours), 0);
    let mut after = 0u64;
    // SAFETY: as above.
    unsafe {
        rt::hsa_system_get_info(
            HSA_SYSTEM_INFO_TIMESTAMP,
            &mut after as *mut u64 as *mut c_void,
        )
    };
    let time = |s| {
        let mut t = hsa_amd_profiling_dispatch_time_t::default();
        // SAFETY: valid out pointer.
        assert_eq!(
            unsafe { rt::hsa_amd_profiling_get_dispatch_time(gpu(), s, &mut t) },
            0
        );
        (t.start, t.end)
    };
    let (start, end) = time(*ours);
    assert!(
        before <= start && start <= end && end <= after,
        "{before} {start} {end} {after}"
    );
    // As the command processor times every packet with a completion
    // signal, the app's signal, completed by the tool's barrier, carries
    // the barrier's times: after the kernel's end, not the kernel's.
    let (app_start, app_end) = time(app);
    assert!(
        end <= app_start && app_start <= app_end && app_end <= after,
        "kernel ended {end}; the app's signal has {app_start}..{app_end}"
    );
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}

static ORDER: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

unsafe extern "C" fn inner(
    pkts: *const c_void,
    count: u64,
    _i: u64,
    _d: *mut c_void,
    writer: InterceptPacketWriter,
) {
    ORDER.lock().unwrap().push("inner");
    // SAFETY: forwarding what we were given.
    unsafe { writer.unwrap()(pkts, count) };
}

unsafe extern "C" fn outer(
    pkts: *const c_void,
    count: u64,
    _i: u64,
    data: *mut c_void,
    writer: InterceptPacketWriter,
) {
    ORDER.lock().unwrap().push("outer");
    // SAFETY: data counts dropped packets; pkts holds `count` packets.
    unsafe {
        let p = *(pkts as *const AqlPacket);
        if packet::packet_type(p.header()) == HSA_PACKET_TYPE_KERNEL_DISPATCH {
            *(data as *mut u32) += 1;
            writer.unwrap()(pkts, 0); // drop it
        } else {
            writer.unwrap()(pkts, count);
        }
    }
}

#[test]
fn last_registered_interceptor_is_outermost_and_zero_count_drops() {
    let k = test_kernels();
    let record = kernel_object(k.executable, "record.kd");
    let q = intercept_queue(64);
    let dropped = Box::leak(Box::new(0u32));
    register(q, Some(inner), std::ptr::null_mut());
    register(q, Some(outer), dropped as *mut u32 as *mut c_void);
    let mut log = RecordLog::new();
    let done = signal(1);
    submit(
        q,
        &[
            dispatch(record, log.kernarg(1), 1, hsa_signal_t::default(), false),
            barrier_and(&[], done),
        ],
    );
    assert_eq!(wait_eq(done, 0), 0);
    assert!(log.entries().is_empty(), "the dropped dispatch never ran");
    assert_eq!(*dropped, 1);
    // Every writer call goes one level inward, even with 0 packets.
    assert_eq!(*ORDER.lock().unwrap(), ["outer", "inner", "outer", "inner"]);
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}

unsafe extern "C" fn pass_through(
    pkts: *const c_void,
    count: u64,
    _i: u64,
    _d: *mut c_void,
    writer: InterceptPacketWriter,
) {
    // SAFETY: forwarding what we were given.
    unsafe { writer.unwrap()(pkts, count) };
}

#[test]
fn doorbell_through_an_interceptor_chain_allocates_nothing_per_packet() {
    let q = intercept_queue(64);
    register(q, Some(pass_through), std::ptr::null_mut());
    register(q, Some(pass_through), std::ptr::null_mut());
    let none = hsa_signal_t::default();
    // Warm-up: per-thread bookkeeping of the first doorbell may allocate once.
    submit(q, &[barrier_and(&[], none)]);
    let before = crate::alloc_count::on_this_thread();
    // 40 packets, one doorbell each: fewer than the ring's 64 slots, so the
    // hardware ring never overflows (that path may allocate).
    for _ in 0..40 {
        submit(q, &[barrier_and(&[], none)]);
    }
    let allocations = crate::alloc_count::on_this_thread() - before;
    assert_eq!(
        allocations, 0,
        "allocations on the doorbell path for 40 packets"
    );
    let done = signal(1);
    submit(q, &[barrier_and(&[], done)]);
    assert_eq!(
        wait_eq(done, 0),
        0,
        "every packet reached the hardware ring"
    );
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}

/// Counts its calls in the AtomicU32 at `data` and passes the packets on.
unsafe extern "C" fn counting(
    pkts: *const c_void,
    count: u64,
    _i: u64,
    data: *mut c_void,
    writer: InterceptPacketWriter,
) {
    // SAFETY: data is a leaked AtomicU32; forwarding what we were given.
    unsafe {
        (*(data as *const std::sync::atomic::AtomicU32))
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        writer.unwrap()(pkts, count)
    };
}

#[test]
fn an_interceptor_registered_between_doorbells_is_outermost_from_the_next_packet() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let q = intercept_queue(64);
    let first: &'static AtomicU32 = Box::leak(Box::new(AtomicU32::new(0)));
    let second: &'static AtomicU32 = Box::leak(Box::new(AtomicU32::new(0)));
    register(q, Some(counting), first as *const AtomicU32 as *mut c_void);
    let done = signal(1);
    submit(q, &[barrier_and(&[], done)]);
    assert_eq!(wait_eq(done, 0), 0);
    assert_eq!(first.load(Ordering::SeqCst), 1);
    // The queue has run packets through the one-interceptor chain; a
    // registration now must reach the very next packet.
    register(q, Some(counting), second as *const AtomicU32 as *mut c_void);
    let done = signal(1);
    submit(q, &[barrier_and(&[], done)]);
    assert_eq!(wait_eq(done, 0), 0);
    assert_eq!(
        second.load(Ordering::SeqCst),
        1,
        "the new outermost interceptor"
    );
    assert_eq!(
        first.load(Ordering::SeqCst),
        2,
        "reached through its writer"
    );
    // SAFETY: q is live.
    unsafe { rt::hsa_queue_destroy(q) };
}

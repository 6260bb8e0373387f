//! Intercept queues: reachable through the table only, run on the doorbell
//! thread, chain with the last registered outermost, expand packets, and
//! overflow into the async retry path when the hardware ring is full.

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
use std::ffi::c_void;
use std::sync::Mutex;
use std::time::Duration;

fn amd_table() -> &'static AmdExtTable {
    // SAFETY: the root table and its AMD table live for the whole process.
    unsafe { &*(*rt::api::root_table()).amd_ext_ }
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

/// What the expanding interceptor saw.
struct Expander {
    calls: Mutex<Vec<(u64, u64, std::thread::ThreadId)>>,
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
        me.calls
            .lock()
            .unwrap()
            .push((count, index, std::thread::current().id()));
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
fn expansion_overflows_the_hardware_ring_and_is_retried_in_order() {
    let k = test_kernels();
    let record = kernel_object(k.executable, "record.kd");
    let q = intercept_queue(4);
    // SAFETY: q is live.
    assert_eq!(
        unsafe { (*q).size },
        64,
        "size rounded up to ROCr's minimum"
    );
    let expander = Box::leak(Box::new(Expander {
        calls: Mutex::new(Vec::new()),
    }));
    register(q, Some(expand), expander as *mut Expander as *mut c_void);
    let mut log = RecordLog::new();
    let hold = signal(1);
    let done = signal(1);
    // 1 held barrier + 30 dispatches × 3 = 91 packets for a 64-slot ring.
    submit(q, &[barrier_and(&[hold], hsa_signal_t::default())]);
    let dispatches: Vec<AqlPacket> = (1..=30)
        .map(|id| dispatch(record, log.kernarg(id), 1, hsa_signal_t::default(), false))
        .collect();
    for chunk in dispatches.chunks(10) {
        submit(q, chunk);
    }
    submit(q, &[barrier_and(&[], done)]);
    {
        let calls = expander.calls.lock().unwrap();
        assert_eq!(
            calls.len(),
            32,
            "one call per packet, already made on the doorbell thread"
        );
        assert!(calls.iter().all(|(count, _, _)| *count == 1));
        assert!(
            calls
                .iter()
                .all(|(_, _, t)| *t == std::thread::current().id()),
            "callbacks run on the doorbell thread"
        );
        assert_eq!(
            calls.iter().map(|c| c.1).collect::<Vec<_>>(),
            (0..32).collect::<Vec<u64>>(),
            "user packet indices"
        );
    }
    std::thread::sleep(Duration::from_millis(30));
    assert!(log.entries().is_empty(), "held behind the barrier");
    store(hold, 0);
    assert_eq!(wait_eq(done, 0), 0, "the overflow drained");
    let expected: Vec<u32> = (1..=30)
        .flat_map(|id| [id * 10, id * 10 + 1, id * 10 + 2])
        .collect();
    assert_eq!(log.entries(), expected);
    // SAFETY: q is live; the proxy ring is fully consumed.
    unsafe {
        assert_eq!(rt::hsa_queue_load_read_index_scacquire(q), 32);
        assert_eq!(rt::hsa_queue_destroy(q), 0);
    }
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

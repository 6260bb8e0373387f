//! Evidence for "the non-target packet path does not allocate" (issue 4,
//! item 8): the intercept queue's packet callback, called as the runtime
//! calls it, under a counting global allocator that counts the calling
//! thread's allocations (this test binary only).
//!
//! On locks: the non-target path touches atomics only: the kernel table's
//! per-thread cache (on a miss, its snapshot load through arc-swap), the
//! kernel's dispatch counter and, for a target, the process's lifecycle
//! stage; it clones no `Arc`. The first lookup of a thread registers the
//! thread with arc-swap once (a slot reused by later threads); each test
//! does one call before it counts.

use ditto::capture::kernel_table::KernelInfo;
use ditto::hsa::packet::QueueContext;
use ditto::hsa::packet::on_packets;
use ditto::hsa::tool::HsaTool;
use ditto::lifecycle::Lifecycle;
use ditto::options::Options;
use hsa::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting each thread's allocations.
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    // A const-initialised Cell has no destructor: reading it never allocates.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's layout, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: as above; `ptr` came from this allocator, i.e. from System.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const TARGET_OBJECT: u64 = 0xaa00;
const OTHER_OBJECT: u64 = 0xbb00;
const UNKNOWN_OBJECT: u64 = 0xdead;

/// Packets the fake writer received (it must not allocate either).
static WRITTEN: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn counting_writer(_pkts: *const c_void, count: u64) {
    WRITTEN.fetch_add(count, Ordering::Relaxed);
}

static SIGNALS: AtomicU64 = AtomicU64::new(1);

unsafe extern "C" fn fake_signal_create(
    _value: hsa_signal_value_t,
    _consumers: u32,
    _agents: *const hsa_agent_t,
    signal: *mut hsa_signal_t,
) -> hsa_status_t {
    // SAFETY: valid out-pointer from the caller.
    unsafe { (*signal).handle = SIGNALS.fetch_add(1, Ordering::Relaxed) };
    HSA_STATUS_SUCCESS
}

/// A tool capturing scale_values, with scale_values<float> (the target) and
/// vector_add loaded, over fake table entries; leaked like the real one.
/// The receiver keeps the job channel open.
fn tool() -> (
    &'static QueueContext,
    crossbeam_channel::Receiver<ditto::hsa::worker::WorkerMessage>,
) {
    // SAFETY: all-zero tables are valid (every entry None).
    let mut core: CoreApiTable = unsafe { std::mem::zeroed() };
    core.hsa_signal_create_fn = Some(fake_signal_create);
    // SAFETY: as above.
    let amd: AmdExtTable = unsafe { std::mem::zeroed() };
    let options = Options::from_lookup(|k| (k == "DITTO_KERNEL").then(|| "scale_values".into()));
    let lifecycle = Box::leak(Box::new(Lifecycle::capturing()));
    let (tool, jobs) = HsaTool::new(options, core, amd, 1_000_000_000, lifecycle);
    let tool: &'static HsaTool = Box::leak(Box::new(tool));
    let query = tool.options.kernel.as_deref();
    tool.kernels.insert(
        TARGET_OBJECT,
        KernelInfo::new("_Z12scale_valuesIfEvPT_S1_S0_i.kd", 24, query, None).0,
    );
    tool.kernels.insert(
        OTHER_OBJECT,
        KernelInfo::new("_Z10vector_addPKfS0_Pfi.kd", 28, query, None).0,
    );
    let ctx = Box::leak(Box::new(QueueContext {
        tool,
        queue: 0x5150,
        agent: 0x6a,
    }));
    (ctx, jobs)
}

fn dispatch(kernel_object: u64, kernarg: &mut [u8; 32]) -> AqlPacket {
    AqlPacket::from_dispatch(&hsa_kernel_dispatch_packet_t {
        header: header(HSA_PACKET_TYPE_KERNEL_DISPATCH, false),
        setup: 1,
        workgroup_size_x: 64,
        workgroup_size_y: 1,
        workgroup_size_z: 1,
        grid_size_x: 1024,
        grid_size_y: 1,
        grid_size_z: 1,
        kernel_object,
        kernarg_address: kernarg.as_mut_ptr() as *mut c_void,
        ..Default::default()
    })
}

fn barrier() -> AqlPacket {
    AqlPacket::from_barrier(&hsa_barrier_and_packet_t {
        header: header(HSA_PACKET_TYPE_BARRIER_AND, true),
        completion_signal: hsa_signal_t { handle: 99 },
        ..Default::default()
    })
}

/// The packet callback on `packets`, as the runtime calls it; returns the
/// allocations this thread made during the call.
fn allocations_of_one_call(ctx: &QueueContext, packets: &[AqlPacket]) -> u64 {
    let before = allocations();
    // SAFETY: `packets` are live for the call; `ctx` is leaked.
    unsafe {
        on_packets(
            packets.as_ptr() as *const c_void,
            packets.len() as u64,
            0,
            ctx as *const QueueContext as *mut c_void,
            Some(counting_writer),
        )
    };
    allocations() - before
}

#[test]
fn non_target_packets_pass_the_callback_without_one_allocation() {
    let (ctx, jobs) = tool();
    let mut kernarg = [0u8; 32];
    let batch = [
        dispatch(OTHER_OBJECT, &mut kernarg),
        barrier(),
        dispatch(UNKNOWN_OBJECT, &mut kernarg),
    ];
    allocations_of_one_call(ctx, &batch); // this thread's first lookup
    let written = WRITTEN.load(Ordering::Relaxed);
    let mut allocated = 0;
    for _ in 0..1000 {
        allocated += allocations_of_one_call(ctx, &batch);
    }
    assert_eq!(
        allocated, 0,
        "allocations on the non-target path over 1000 calls"
    );
    assert!(WRITTEN.load(Ordering::Relaxed) - written >= 3000);
    assert_eq!(
        ctx.tool.kernels.get(OTHER_OBJECT).unwrap().dispatches(),
        1001
    );
    assert!(jobs.try_recv().is_err(), "no job for a non-target packet");
}

#[test]
fn a_target_dispatch_after_capture_failed_open_passes_without_allocating() {
    let (ctx, jobs) = tool();
    let mut kernarg = [0u8; 32];
    let target = [dispatch(TARGET_OBJECT, &mut kernarg)];
    ctx.tool.lifecycle.fail("test: the collector went away");
    allocations_of_one_call(ctx, &target);
    let allocated: u64 = (0..1000)
        .map(|_| allocations_of_one_call(ctx, &target))
        .sum();
    assert_eq!(allocated, 0);
    assert!(jobs.try_recv().is_err(), "nothing held once failed open");
}

/// The counter sees the callback's allocations: a held target dispatch
/// copies its kernarg bytes and queues a job.
#[test]
fn the_counter_sees_the_allocations_of_a_held_target_dispatch() {
    let (ctx, jobs) = tool();
    let mut kernarg = [0u8; 32];
    let target = [dispatch(TARGET_OBJECT, &mut kernarg)];
    allocations_of_one_call(ctx, &target);
    assert!(allocations_of_one_call(ctx, &target) > 0);
    assert_eq!(jobs.try_iter().count(), 2, "both dispatches held");
}

//! The real HSA BufferSource against ditto's CPU HSA runtime: memory
//! allocated and exported in this process through the same dlopen'ed
//! runtime is attached, copied and detached by the collector, and no extra
//! mapping of the runtime's pool memfd ("hsa-cpu-pool") survives an ack.
//!
//! The runtime runs in its large-BAR mode (DITTO_HSA_CPU_LARGE_BAR=1): these
//! tests fill the exported memory with CPU stores and read attachments in
//! place, which a discrete GPU without a large BAR forbids (the copy path
//! the collector takes there is what every end-to-end test on the CPU
//! runtime now uses; `cpu_reads_gpu_memory` decides between them, checked
//! here in both modes through the pool attribute).
//!
//! Needs target/<profile>/hsa-cpu/libhsa-runtime64.so.1 (or
//! DITTO_CPU_RUNTIME_DIR): run `cargo build --workspace` first.

mod support;

use ditto_cli::collector::hsa::HsaBufferSource;
use ditto_cli::collector::hsa_runtime::HsaRuntime;
use ditto_cli::collector::{
    BufferSource, Collector, CollectorConfig, Mapping, SnapshotLayout, SocketPlace, SourceError,
};
use ditto_cli::store::Snapshot;
use ditto_protocol::{Buffer, DType, Transport, fingerprint};
use hsa::*;
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use support::*;

const POOL_MEMFD: &str = "hsa-cpu-pool";

fn cpu_runtime_library() -> PathBuf {
    let dir = match std::env::var_os("DITTO_CPU_RUNTIME_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            // target/<profile>/deps/<test> → target/<profile>/hsa-cpu
            let exe = std::env::current_exe().unwrap();
            exe.parent().unwrap().parent().unwrap().join("hsa-cpu")
        }
    };
    let lib = dir.join("libhsa-runtime64.so.1");
    assert!(
        lib.exists(),
        "ditto's CPU HSA runtime is missing at {}: run `cargo build --workspace` first (or set DITTO_CPU_RUNTIME_DIR)",
        lib.display()
    );
    lib
}

fn runtime() -> Arc<HsaRuntime> {
    static RT: OnceLock<Arc<HsaRuntime>> = OnceLock::new();
    RT.get_or_init(|| {
        // SAFETY: set before the runtime (the only reader) is loaded, under
        // the OnceLock: no other thread reads the environment here.
        unsafe { std::env::set_var("DITTO_HSA_CPU_LARGE_BAR", "1") };
        let rt =
            HsaRuntime::load(&cpu_runtime_library()).expect("CPU runtime loads and initialises");
        assert!(
            rt.cpu_reads_gpu_memory(),
            "a large-BAR runtime says the CPU may read its GPU memory"
        );
        Arc::new(rt)
    })
    .clone()
}

/// The tests count mappings of the whole process: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Mappings of the pool memfd in this process.
fn pool_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains(POOL_MEMFD))
        .count()
}

struct PoolSearch {
    get_info: HsaAmdMemoryPoolGetInfoFn,
    found: Option<hsa_amd_memory_pool_t>,
}

unsafe extern "C" fn find_global_pool(
    pool: hsa_amd_memory_pool_t,
    data: *mut c_void,
) -> hsa_status_t {
    // SAFETY: data is the &mut PoolSearch passed below.
    let s = unsafe { &mut *(data as *mut PoolSearch) };
    let mut segment: u32 = u32::MAX;
    let mut alloc_allowed = false;
    // SAFETY: SEGMENT writes a u32, RUNTIME_ALLOC_ALLOWED a bool.
    unsafe {
        (s.get_info)(
            pool,
            HSA_AMD_MEMORY_POOL_INFO_SEGMENT,
            (&mut segment as *mut u32).cast(),
        );
        (s.get_info)(
            pool,
            HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
            (&mut alloc_allowed as *mut bool).cast(),
        );
    }
    if segment == HSA_AMD_SEGMENT_GLOBAL && alloc_allowed {
        s.found = Some(pool);
        return HSA_STATUS_INFO_BREAK;
    }
    HSA_STATUS_SUCCESS
}

/// A device allocation of the test process, exported as an IPC handle.
struct Exported {
    ptr: *mut u8,
    size: usize,
    handle: Vec<u8>,
    free: HsaAmdMemoryPoolFreeFn,
}

impl Drop for Exported {
    fn drop(&mut self) {
        // SAFETY: allocated by hsa_amd_memory_pool_allocate below.
        unsafe { (self.free)(self.ptr.cast()) };
    }
}

fn export(rt: &HsaRuntime, size: usize) -> Exported {
    // SAFETY: each type is the named function's signature (crates/hsa).
    let (iterate, get_info, allocate, free, create) = unsafe {
        (
            rt.symbol::<HsaAmdAgentIterateMemoryPoolsFn>("hsa_amd_agent_iterate_memory_pools")
                .unwrap(),
            rt.symbol::<HsaAmdMemoryPoolGetInfoFn>("hsa_amd_memory_pool_get_info")
                .unwrap(),
            rt.symbol::<HsaAmdMemoryPoolAllocateFn>("hsa_amd_memory_pool_allocate")
                .unwrap(),
            rt.symbol::<HsaAmdMemoryPoolFreeFn>("hsa_amd_memory_pool_free")
                .unwrap(),
            rt.symbol::<HsaAmdIpcMemoryCreateFn>("hsa_amd_ipc_memory_create")
                .unwrap(),
        )
    };
    let agent = rt
        .gpu_agent()
        .expect("the CPU runtime has a GPU-type agent");
    let mut search = PoolSearch {
        get_info,
        found: None,
    };
    // SAFETY: callback and data match; search outlives the call.
    unsafe {
        iterate(
            agent,
            Some(find_global_pool),
            (&mut search as *mut PoolSearch).cast(),
        )
    };
    let pool = search.found.expect("the GPU agent has a global pool");
    let mut ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: ptr receives the allocation.
    assert_eq!(
        unsafe { allocate(pool, size, 0, &mut ptr) },
        HSA_STATUS_SUCCESS
    );
    let mut h = hsa_amd_ipc_memory_t::default();
    // SAFETY: ptr/size are exactly the allocation, as IPC requires.
    assert_eq!(unsafe { create(ptr, size, &mut h) }, HSA_STATUS_SUCCESS);
    let handle = h.handle.iter().flat_map(|w| w.to_ne_bytes()).collect();
    Exported {
        ptr: ptr.cast(),
        size,
        handle,
        free,
    }
}

/// Descriptors of the pool memfd open in this process.
/// Argument 1 (f32, after the kernel) of a dispatch: `extent` bytes at
/// `offset` of the exported allocation, through its IPC handle.
fn output_buffer(alloc: &Exported, offset: usize, extent: usize, fingerprint: u64) -> Buffer {
    Buffer {
        phase: ditto_protocol::Phase::After,
        arg_index: 1,
        name: None,
        dtype: DType::F32,
        transport: Transport::Ipc {
            handle: alloc.handle.clone(),
            owner_node: None,
        },
        owner_pid: std::process::id(),
        alloc_base: alloc.ptr as u64,
        alloc_size: alloc.size as u64,
        offset: offset as u64,
        extent: extent as u64,
        fingerprint,
    }
}

fn pool_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains(POOL_MEMFD))
        .count()
}

/// Counts pool mappings while attached, to show the attach really maps,
/// and the copies made (how many, the largest).
struct Spy {
    inner: HsaBufferSource,
    mappings_while_attached: AtomicUsize,
    copies: AtomicUsize,
    largest_copy: AtomicUsize,
}

impl Spy {
    fn new(inner: HsaBufferSource) -> Spy {
        Spy {
            inner,
            mappings_while_attached: AtomicUsize::new(0),
            copies: AtomicUsize::new(0),
            largest_copy: AtomicUsize::new(0),
        }
    }
}

impl BufferSource for Spy {
    fn attach(
        &self,
        handle: &[u8],
        alloc_size: u64,
        owner_node: Option<u32>,
    ) -> Result<Mapping, SourceError> {
        let m = self.inner.attach(handle, alloc_size, owner_node)?;
        self.mappings_while_attached
            .store(pool_mappings(), Ordering::SeqCst);
        Ok(m)
    }
    fn copy(&self, mapping: &Mapping, offset: u64, dst: &mut [u8]) -> Result<(), SourceError> {
        self.copies.fetch_add(1, Ordering::SeqCst);
        self.largest_copy.fetch_max(dst.len(), Ordering::SeqCst);
        self.inner.copy(mapping, offset, dst)
    }
    fn host_bytes<'m>(&self, mapping: &'m Mapping, offset: u64, len: u64) -> Option<&'m [u8]> {
        self.inner.host_bytes(mapping, offset, len)
    }
    fn detach(&self, mapping: Mapping) -> Result<(), SourceError> {
        self.inner.detach(mapping)
    }
}

#[test]
fn real_ipc_attachments_are_unmapped_before_each_ack() {
    let _serial = serial();
    let rt = runtime();
    let alloc = export(&rt, 64 << 10);
    // SAFETY: CPU-runtime device memory is host memory of this process.
    let bytes = unsafe { std::slice::from_raw_parts_mut(alloc.ptr, alloc.size) };
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i * 7 % 251) as u8;
    }
    let (offset, extent) = (4096usize, 8192usize);
    let expected = bytes[offset..offset + extent].to_vec();

    let dir = tempfile::tempdir().unwrap();
    let spy = Arc::new(Spy::new(HsaBufferSource::new(rt.clone())));
    let collector = Collector::start(
        spy.clone(),
        CollectorConfig::new(SnapshotLayout::Single(dir.path().join("snap"))),
        SocketPlace::Private,
    )
    .unwrap();
    let baseline = pool_mappings();
    let mut tool = Tool::greet(collector.socket_path(), "ref");
    for index in 0..20 {
        let buffer = output_buffer(&alloc, offset, extent, fingerprint(&expected));
        let ack = tool.dispatch(dispatch(index, vec![buffer]));
        assert_eq!(ack.result, Ok(()), "dispatch {index}");
        assert_eq!(
            pool_mappings(),
            baseline,
            "no pool mapping outlives the ack of dispatch {index}"
        );
        assert_eq!(collector.live_attachments(), 0);
    }
    assert!(
        spy.mappings_while_attached.load(Ordering::SeqCst) > baseline,
        "attach adds a mapping of {POOL_MEMFD} (otherwise this test proves nothing)"
    );
    tool.goodbye(20);
    assert!(collector.settle(Duration::from_secs(5)));
    let reports = collector.stop();
    assert_eq!(reports[0].dispatches_captured, 20);
    let snap = Snapshot::load(&dir.path().join("snap")).unwrap();
    let arrays = snap.load_dispatch(&snap.manifest.dispatches[19]).unwrap();
    assert_eq!(arrays[0].1.bytes, expected);
}

/// An exported allocation of `size` bytes, each byte a function of its
/// position, and the `extent` bytes at `offset` as the tool would read them.
fn export_pattern(
    rt: &HsaRuntime,
    size: usize,
    offset: usize,
    extent: usize,
) -> (Exported, Vec<u8>) {
    let alloc = export(rt, size);
    // SAFETY: CPU-runtime device memory is host memory of this process.
    let bytes = unsafe { std::slice::from_raw_parts_mut(alloc.ptr, alloc.size) };
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i * 7 % 251) as u8;
    }
    let expected = bytes[offset..offset + extent].to_vec();
    (alloc, expected)
}

#[test]
fn a_large_buffer_goes_from_the_attachment_into_its_file_exactly_and_a_mismatch_stores_nothing() {
    let _serial = serial();
    let rt = runtime();
    // Over a streamed copy's chunk (8 MiB): windows of the fingerprint
    // straddle chunks; the extent starts off a page boundary.
    let (offset, extent) = (4096 + 8usize, (9 << 20) + 20usize);
    let (alloc, expected) = export_pattern(&rt, (9 << 20) + 3 * 4096, offset, extent);
    let buffer = |fingerprint| output_buffer(&alloc, offset, extent, fingerprint);
    // In place (as `ditto run` reads ditto's CPU runtime), then copied
    // chunk by chunk (as it reads ROCr's device memory).
    for in_place in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let snap_dir = dir.path().join("snap");
        let spy = Arc::new(Spy::new(
            HsaBufferSource::new(rt.clone()).reading_in_place(in_place),
        ));
        let collector = Collector::start(
            spy.clone(),
            CollectorConfig::new(SnapshotLayout::Single(snap_dir.clone())),
            SocketPlace::Private,
        )
        .unwrap();
        let (mappings, fds) = (pool_mappings(), pool_fds());
        let mut tool = Tool::greet(collector.socket_path(), "ref");
        let ack = tool.dispatch(dispatch(0, vec![buffer(fingerprint(&expected))]));
        assert_eq!(ack.result, Ok(()), "in place: {in_place}");
        assert_eq!((pool_mappings(), pool_fds()), (mappings, fds));
        assert_eq!(collector.live_attachments(), 0);
        // The application's bytes are not what the tool fingerprinted.
        let err = tool
            .dispatch(dispatch(1, vec![buffer(fingerprint(&expected) ^ 1)]))
            .result
            .unwrap_err();
        assert!(
            err.contains("dispatch 1")
                && err.contains("argument 1")
                && err.contains("fingerprint mismatch"),
            "{err}"
        );
        assert_eq!((pool_mappings(), pool_fds()), (mappings, fds));
        assert_eq!(collector.live_attachments(), 0);
        tool.goodbye(2);
        assert!(collector.settle(Duration::from_secs(5)));
        let reports = collector.stop();
        assert_eq!(
            (reports[0].dispatches_captured, reports[0].bytes_captured),
            (1, extent as u64)
        );
        if in_place {
            assert_eq!(spy.copies.load(Ordering::SeqCst), 0, "read in place");
        } else {
            assert!(
                spy.copies.load(Ordering::SeqCst) >= 2 * 2,
                "two chunks a dispatch"
            );
            assert_eq!(spy.largest_copy.load(Ordering::SeqCst), 8 << 20);
        }
        let snap = Snapshot::load(&snap_dir).unwrap();
        assert_eq!(snap.manifest.dispatches.len(), 1);
        let arrays = snap.load_dispatch(&snap.manifest.dispatches[0]).unwrap();
        assert!(arrays[0].1.bytes == expected, "the stored bytes differ");
        let missing = &snap.manifest.missing;
        assert_eq!(missing.len(), 1);
        assert_eq!((missing[0].index, missing[0].arg), (1, None));
        assert_eq!(missing[0].reason, ditto_protocol::MissReason::Error);
        // Nothing of the refused file is left, named or temporary.
        let mut names: Vec<String> = std::fs::read_dir(&snap_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "dispatch-0-00000.safetensors",
                "dispatches.jsonl",
                "manifest.json"
            ]
        );
    }
}

#[test]
fn a_buffer_of_64_mib_or_more_read_in_place_is_placed_into_its_file_by_threads_exactly() {
    let _serial = serial();
    let rt = runtime();
    // Past the store's threshold for placing a run with several threads
    // (64 MiB), starting off a page boundary, with an odd length.
    let (offset, extent) = (4096 + 24usize, (65 << 20) + 4100usize);
    let (alloc, expected) = export_pattern(&rt, (65 << 20) + 3 * 4096, offset, extent);
    let dir = tempfile::tempdir().unwrap();
    let snap_dir = dir.path().join("snap");
    let collector = Collector::start(
        Arc::new(HsaBufferSource::new(rt.clone()).reading_in_place(true)),
        CollectorConfig::new(SnapshotLayout::Single(snap_dir.clone())),
        SocketPlace::Private,
    )
    .unwrap();
    let mut tool = Tool::greet(collector.socket_path(), "ref");
    let buffer = output_buffer(&alloc, offset, extent, fingerprint(&expected));
    assert_eq!(tool.dispatch(dispatch(0, vec![buffer])).result, Ok(()));
    assert_eq!(collector.live_attachments(), 0);
    tool.goodbye(1);
    assert!(collector.settle(Duration::from_secs(5)));
    collector.stop();
    let snap = Snapshot::load(&snap_dir).unwrap();
    let arrays = snap.load_dispatch(&snap.manifest.dispatches[0]).unwrap();
    assert_eq!(arrays[0].1.bytes.len(), expected.len());
    assert!(arrays[0].1.bytes == expected, "the stored bytes differ");
}

#[test]
fn a_handle_the_runtime_refuses_is_an_error_ack_and_maps_nothing() {
    let _serial = serial();
    let rt = runtime();
    let alloc = export(&rt, 4096);
    let mut forged = alloc.handle.clone();
    forged[8] ^= 0xff; // the memfd inode word: no longer names the owner's pool
    let dir = tempfile::tempdir().unwrap();
    let collector = Collector::start(
        Arc::new(HsaBufferSource::new(rt.clone())),
        CollectorConfig::new(SnapshotLayout::Single(dir.path().join("snap"))),
        SocketPlace::Private,
    )
    .unwrap();
    let baseline = pool_mappings();
    let mut tool = Tool::greet(collector.socket_path(), "ref");
    let buffer = Buffer {
        phase: ditto_protocol::Phase::After,
        arg_index: 0,
        name: None,
        dtype: DType::U8,
        transport: Transport::Ipc {
            handle: forged,
            owner_node: None,
        },
        owner_pid: std::process::id(),
        alloc_base: alloc.ptr as u64,
        alloc_size: 4096,
        offset: 0,
        extent: 4096,
        fingerprint: 0,
    };
    let err = tool.dispatch(dispatch(0, vec![buffer])).result.unwrap_err();
    assert!(
        err.contains("argument 0") && err.contains("hsa_amd_ipc_memory_attach"),
        "{err}"
    );
    assert_eq!(pool_mappings(), baseline);
    assert_eq!(collector.live_attachments(), 0);
    tool.goodbye(1);
    drop(collector);
}

#[test]
fn a_copy_beyond_the_mapping_is_refused_not_read() {
    let _serial = serial();
    let rt = runtime();
    let alloc = export(&rt, 4096);
    let source = HsaBufferSource::new(rt.clone());
    let mapping = source.attach(&alloc.handle, 4096, None).unwrap();
    let mut dst = vec![0u8; 16];
    for offset in [4096 - 8, 4096, u64::MAX - 4] {
        let err = source
            .copy(&mapping, offset, &mut dst)
            .unwrap_err()
            .to_string();
        assert!(err.contains("outside the 4096-byte mapping"), "{err}");
    }
    source.copy(&mapping, 4096 - 16, &mut dst).unwrap();
    source.detach(mapping).unwrap();
}

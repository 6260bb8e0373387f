//! The collector's device-to-host copy of a long CUDA run, at the speed of
//! the copy engines: the run is cut into contiguous shares, one per thread
//! (each cut on a 2 MiB boundary of the destination, [`share_cuts`]), and
//! each thread moves its share through two page-locked buffers on two
//! streams of its own: while the device copies chunk k+1 into one buffer
//! (`cuMemcpyDtoHAsync`), the thread copies chunk k from the other into the
//! destination (a tensor file's shared mapping, whose page faults several
//! threads take at once). The page-locked buffers and streams are made on
//! first use and kept for the collector's life ([`CopyEngine`]'s pool), so
//! a capture pays no allocation.
//!
//! Where the driver lacks the asynchronous entry points, or page-locked
//! memory is refused, each thread copies its share with `cuMemcpyDtoH`
//! (the driver's own bounce buffer). The debug log says, per run, how the
//! time went: waiting for the device, copying into the destination (page
//! faults included) and the page faults taken.
//!
//! Owns no attachment: the caller's mapping stays open across the call.

use super::cuda_driver::{Driver, DriverError};
use crate::store::share_cuts;
use cuda_abi::{CU_STREAM_NON_BLOCKING, CuDevicePtr, CuStream};
use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Bytes per device-to-host copy into a page-locked buffer.
const CHUNK: usize = 4 << 20;

/// At most this many threads copy one run.
const MAX_THREADS: usize = 16;

/// Each thread copies at least this many bytes.
const MIN_SHARE: usize = 16 << 20;

/// Why a run was not copied.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CopyError {
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error("a copy thread panicked")]
    ThreadPanicked,
}

/// One thread's means on one device: two streams (of that device's
/// primary context), a page-locked chunk buffer for each.
struct Lane {
    device: usize,
    streams: [CuStream; 2],
    buffers: [*mut u8; 2],
}

// SAFETY: stream handles and page-locked host buffers, used by one thread
// at a time (a lane is taken from the pool, used, and put back).
unsafe impl Send for Lane {}

/// The pool of lanes, shared by every run the collector copies.
pub(super) struct CopyEngine {
    idle: Mutex<Vec<Lane>>,
    /// Lanes could not be made once: later runs do not try again.
    refused: AtomicBool,
}

/// Where the time of one run went, summed over its threads.
#[derive(Default)]
struct Spent {
    waiting_ns: AtomicU64,
    copying_ns: AtomicU64,
}

impl CopyEngine {
    pub(super) fn new() -> CopyEngine {
        CopyEngine {
            idle: Mutex::new(Vec::new()),
            refused: AtomicBool::new(false),
        }
    }

    /// How many threads copy a run of `len` bytes.
    fn threads_for(len: usize) -> usize {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        cpus.min(MAX_THREADS).min(len / MIN_SHARE).max(1)
    }

    /// A lane of `device` from the pool, or a new one (the device's
    /// context is current); `None` when the driver cannot make one (no
    /// asynchronous copies, no page-locked memory).
    fn take_lane(&self, driver: &Driver, device: usize) -> Option<Lane> {
        {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(at) = idle.iter().rposition(|l| l.device == device) {
                return Some(idle.swap_remove(at));
            }
        }
        if self.refused.load(Ordering::Relaxed) {
            return None;
        }
        let made = make_lane(driver, device);
        if made.is_none() {
            self.refused.store(true, Ordering::Relaxed);
        }
        made
    }

    fn put_back(&self, lane: Lane) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(lane);
    }

    /// Copies `dst.len()` bytes at device address `src` (opened in
    /// `device`'s context) into `dst`.
    pub(super) fn copy(
        &self,
        driver: &Driver,
        device: usize,
        src: CuDevicePtr,
        dst: &mut [u8],
    ) -> Result<(), CopyError> {
        let debug = crate::log::enabled(crate::log::Level::Debug);
        let started = Instant::now();
        let faults_before = if debug { minor_faults() } else { 0 };
        let threads = Self::threads_for(dst.len());
        let cuts = share_cuts(dst.as_ptr() as usize, dst.len(), threads);
        let spent = Spent::default();
        let mut shares = Vec::with_capacity(cuts.len() - 1);
        let mut rest = dst;
        for w in cuts.windows(2) {
            let (share, after) = rest.split_at_mut(w[1] - w[0]);
            rest = after;
            shares.push((src + w[0] as u64, share));
        }
        let pipelined = AtomicU64::new(0);
        let results: Vec<Result<(), CopyError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = shares
                .into_iter()
                .map(|(from, share)| {
                    let (spent, pipelined) = (&spent, &pipelined);
                    scope.spawn(move || -> Result<(), CopyError> {
                        driver.make_current(device)?;
                        match self.take_lane(driver, device) {
                            Some(lane) => {
                                pipelined.fetch_add(1, Ordering::Relaxed);
                                let r = copy_share(driver, &lane, from, share, spent);
                                self.put_back(lane);
                                Ok(r?)
                            }
                            None => {
                                let t = Instant::now();
                                let r = driver.copy_to_host(from, share);
                                spent
                                    .waiting_ns
                                    .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                                Ok(r?)
                            }
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Err(CopyError::ThreadPanicked)))
                .collect()
        });
        if debug {
            let ms = |ns: &AtomicU64| ns.load(Ordering::Relaxed) as f64 / 1e6;
            crate::log::debug(&format!(
                "CUDA copy of {} bytes: {:.1} ms with {} thread(s), {} through page-locked \
                 buffers; summed over threads: {:.1} ms waiting for the device, {:.1} ms copying \
                 into the destination; {} page faults",
                cuts.last().copied().unwrap_or(0),
                started.elapsed().as_secs_f64() * 1e3,
                cuts.len() - 1,
                pipelined.load(Ordering::Relaxed),
                ms(&spent.waiting_ns),
                ms(&spent.copying_ns),
                minor_faults().saturating_sub(faults_before)
            ));
        }
        results.into_iter().collect()
    }
}

/// Two streams and two page-locked buffers of [`CHUNK`] bytes, in
/// `device`'s context (current on this thread).
fn make_lane(driver: &Driver, device: usize) -> Option<Lane> {
    let (create, alloc) = (driver.cu_stream_create?, driver.cu_mem_alloc_host?);
    driver.cu_memcpy_dtoh_async?;
    driver.cu_stream_synchronize?;
    let mut lane = Lane {
        device,
        streams: [std::ptr::null_mut(); 2],
        buffers: [std::ptr::null_mut(); 2],
    };
    for k in 0..2 {
        let mut p: *mut c_void = std::ptr::null_mut();
        // Non-blocking streams: the collector's copies wait for nothing of
        // its own (no legacy default stream).
        // SAFETY: out-pointers; the context is current on this thread.
        let made = unsafe {
            create(&mut lane.streams[k], CU_STREAM_NON_BLOCKING) == 0 && alloc(&mut p, CHUNK) == 0
        };
        if !made || p.is_null() {
            crate::log::debug(
                "CUDA copy: no page-locked buffer or stream; copying with cuMemcpyDtoH",
            );
            return None;
        }
        lane.buffers[k] = p as *mut u8;
    }
    Some(lane)
}

/// One thread's share through its lane: chunk k is copied by the device
/// into buffer k % 2 on stream k % 2 while the thread copies chunk k - 1
/// out of the other. Both streams are idle when this returns, on every path.
fn copy_share(
    driver: &Driver,
    lane: &Lane,
    src: CuDevicePtr,
    dst: &mut [u8],
    spent: &Spent,
) -> Result<(), DriverError> {
    let async_copy = driver.cu_memcpy_dtoh_async.expect("checked by make_lane");
    let sync = driver.cu_stream_synchronize.expect("checked by make_lane");
    let chunks: Vec<(usize, usize)> = (0..dst.len())
        .step_by(CHUNK)
        .map(|at| (at, CHUNK.min(dst.len() - at)))
        .collect();
    let issue = |k: usize| -> Result<(), DriverError> {
        let (at, len) = chunks[k];
        // SAFETY: the lane's buffer holds CHUNK bytes; the device range
        // lies inside the caller's mapping; the stream is the lane's.
        let r = unsafe {
            async_copy(
                lane.buffers[k % 2] as *mut c_void,
                src + at as u64,
                len,
                lane.streams[k % 2],
            )
        };
        driver.check(r, "cuMemcpyDtoHAsync")
    };
    let wait = |k: usize| -> Result<(), DriverError> {
        // SAFETY: the lane's own stream.
        let r = unsafe { sync(lane.streams[k % 2]) };
        driver.check(r, "cuStreamSynchronize")
    };
    let mut result = (0..chunks.len().min(2)).try_for_each(issue);
    let mut k = 0;
    while result.is_ok() && k < chunks.len() {
        let t = Instant::now();
        result = wait(k);
        spent
            .waiting_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if result.is_err() {
            break;
        }
        let (at, len) = chunks[k];
        let t = Instant::now();
        // SAFETY: the device finished writing `len` bytes into the buffer
        // (its stream is synchronised); nothing else uses the lane.
        let chunk = unsafe { std::slice::from_raw_parts(lane.buffers[k % 2], len) };
        dst[at..at + len].copy_from_slice(chunk);
        spent
            .copying_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if k + 2 < chunks.len() {
            result = issue(k + 2);
        }
        k += 1;
    }
    // Whatever failed, nothing may still be copying into the lane's
    // buffers when it goes back to the pool.
    for s in lane.streams {
        // SAFETY: the lane's own streams.
        unsafe { sync(s) };
    }
    result
}

/// Minor page faults of this process so far.
fn minor_faults() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } != 0 {
        return 0;
    }
    // SAFETY: filled by the successful call.
    unsafe { usage.assume_init() }.ru_minflt as u64
}

#[cfg(test)]
mod tests {
    //! The engine over a stand-in driver whose asynchronous copies run only
    //! when their stream is synchronised (as a device's do: a thread that
    //! read its buffer before waiting would see old bytes), and fail on a
    //! stream of another context than the current one.
    use super::super::cuda_driver::stand_in_context;
    use super::*;
    use std::collections::HashMap;

    type Pending = Vec<(usize, u64, usize)>;
    static STREAMS: Mutex<Option<HashMap<usize, Pending>>> = Mutex::new(None);
    static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);
    /// The context each stream was made in.
    static STREAM_CONTEXTS: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

    unsafe extern "C" fn stream_create(s: *mut CuStream, _flags: u32) -> i32 {
        let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed) as usize;
        STREAM_CONTEXTS
            .lock()
            .unwrap()
            .get_or_insert_with(HashMap::new)
            .insert(id, stand_in_context());
        // SAFETY: the engine passes a valid out-pointer.
        unsafe { *s = id as CuStream };
        0
    }
    unsafe extern "C" fn alloc_host(p: *mut *mut c_void, len: usize) -> i32 {
        // SAFETY: as above; the buffer lives for the test process.
        unsafe { *p = Box::leak(vec![0u8; len].into_boxed_slice()).as_mut_ptr() as *mut c_void };
        0
    }
    unsafe extern "C" fn copy_async(dst: *mut c_void, src: u64, len: usize, s: CuStream) -> i32 {
        let made_in = STREAM_CONTEXTS.lock().unwrap().as_ref().unwrap()[&(s as usize)];
        if made_in != stand_in_context() {
            return 201; // CUDA_ERROR_INVALID_CONTEXT
        }
        // Poison the destination now: only the synchronisation copies.
        // SAFETY: `dst` holds `len` bytes (a lane's buffer).
        unsafe { std::ptr::write_bytes(dst as *mut u8, 0xee, len) };
        let mut streams = STREAMS.lock().unwrap();
        let pending = streams.get_or_insert_with(HashMap::new).entry(s as usize);
        pending.or_default().push((dst as usize, src, len));
        0
    }
    unsafe extern "C" fn synchronize(s: CuStream) -> i32 {
        let work = STREAMS
            .lock()
            .unwrap()
            .get_or_insert_with(HashMap::new)
            .remove(&(s as usize))
            .unwrap_or_default();
        for (dst, src, len) in work {
            // SAFETY: host ranges the test made, `len` bytes each.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
        }
        0
    }

    /// The stand-in driver with this module's asynchronous entry points.
    fn asynchronous_driver() -> Driver {
        Driver::stand_in(
            Some(stream_create),
            Some(synchronize),
            Some(alloc_host),
            Some(copy_async),
        )
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len as u64)
            .map(|i| (i.wrapping_mul(0x9e37_79b9) >> 11) as u8)
            .collect()
    }

    #[test]
    fn a_long_run_arrives_whole_through_overlapped_chunks_on_every_thread_count() {
        let driver = asynchronous_driver();
        let engine = CopyEngine::new();
        // Lengths that end mid-chunk, that give one chunk, and that give
        // several threads (MIN_SHARE each).
        for len in [CHUNK + 17, 3 * CHUNK, 2 * MIN_SHARE + 5 * CHUNK + 4099] {
            let device = pattern(len + 64);
            let mut dst = vec![0u8; len];
            engine
                .copy(&driver, 0, device.as_ptr() as u64 + 64, &mut dst)
                .expect("copied");
            assert!(dst[..] == device[64..], "{len} bytes differ");
        }
        // The lanes went back to the pool, both streams idle (the other
        // tests' streams may be busy at the same time).
        let idle = engine.idle.lock().unwrap();
        assert!(!idle.is_empty());
        let streams = STREAMS.lock().unwrap();
        let pending = streams.as_ref().unwrap();
        for lane in idle.iter() {
            for s in lane.streams {
                assert!(pending.get(&(s as usize)).is_none_or(Vec::is_empty));
            }
        }
    }

    #[test]
    fn each_device_copies_through_lanes_made_in_its_own_context() {
        let driver = asynchronous_driver();
        let engine = CopyEngine::new();
        let len = 2 * MIN_SHARE + CHUNK + 5;
        let device = pattern(len);
        // Alternating devices: a lane of the other device would be refused.
        for d in [0, 1, 0, 1] {
            let mut dst = vec![0u8; len];
            engine
                .copy(&driver, d, device.as_ptr() as u64, &mut dst)
                .unwrap_or_else(|e| panic!("device {d}: {e}"));
            assert!(dst == device, "device {d}: bytes differ");
        }
        let idle = engine.idle.lock().unwrap();
        for d in [0, 1] {
            assert!(idle.iter().any(|l| l.device == d), "no lane of device {d}");
        }
    }

    #[test]
    fn without_asynchronous_entry_points_each_thread_copies_with_the_plain_copy() {
        let driver = Driver::stand_in(None, None, None, None);
        let engine = CopyEngine::new();
        let len = 2 * MIN_SHARE + 123;
        let device = pattern(len);
        let mut dst = vec![0u8; len];
        engine
            .copy(&driver, 0, device.as_ptr() as u64, &mut dst)
            .expect("copied");
        assert!(dst == device);
        assert!(engine.idle.lock().unwrap().is_empty());
        assert!(engine.refused.load(Ordering::Relaxed));
    }
}

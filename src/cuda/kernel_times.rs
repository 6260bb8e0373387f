//! Each captured CUDA launch's own GPU time, from CUPTI's activity records:
//! concurrent-kernel records (`CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`) are
//! enabled only while a captured launch is in flight, so other launches run
//! without them; once the launch's stream is synchronised the records are
//! flushed, and the one whose correlation id is the launch callback's gives
//! the kernel's start and end timestamps on the GPU: the kernel alone, not
//! the launch call or the queueing before it (what HSA's dispatch
//! timestamps give).
//!
//! Records are read at the offsets every `CUpti_ActivityKernel` version
//! since 4 (CUDA 9) shares: kind at 0, start at 16, end at 24, correlation
//! id at 92. Owns the activity buffers and the times they gave; without
//! the activity API (an old or stand-in libcupti) launches are not timed.

use crate::guard::ffi_guard;
use crate::log::log_warn;
use cuda_abi::{Library, as_fn};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, OnceLock};

/// `CUPTI_ACTIVITY_KIND_KERNEL` and `_CONCURRENT_KERNEL`.
const KIND_KERNEL: u32 = 3;
const KIND_CONCURRENT_KERNEL: u32 = 10;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: flush records of buffers not yet full.
const FLUSH_FORCED: u32 = 1;
/// Offsets of the fields read in a kernel record.
const START_OFFSET: usize = 16;
const END_OFFSET: usize = 24;
const CORRELATION_OFFSET: usize = 92;
/// The least a kernel record holds (through its correlation id).
const KERNEL_RECORD_MIN: usize = CORRELATION_OFFSET + 4;
/// Size of each activity buffer handed to CUPTI; CUPTI asks for 8-byte
/// alignment.
const BUFFER_BYTES: usize = 256 * 1024;
/// Times kept at most for launches whose exit has not read them yet
/// (another tool's launches may leave records nobody asks for).
const MAX_KEPT: usize = 4096;

type RequestFn = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
type CompleteFn = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
type NextRecordFn = unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> c_int;

/// The activity API of a loaded libcupti.
pub struct KernelTimes {
    enable: unsafe extern "C" fn(u32) -> c_int,
    disable: unsafe extern "C" fn(u32) -> c_int,
    flush_all: unsafe extern "C" fn(u32) -> c_int,
    /// Captured launches in flight: records are on while it is above zero.
    in_flight: Mutex<u32>,
}

/// What the completion callback needs: the record iterator, and the times
/// read (nanoseconds, by correlation id).
struct Records {
    next_record: NextRecordFn,
    times: Mutex<HashMap<u32, u64>>,
}

static RECORDS: OnceLock<Records> = OnceLock::new();

impl KernelTimes {
    /// The activity API of `cupti`, its buffer callbacks registered; `None`
    /// (said once) where the library lacks it or refuses the callbacks.
    pub fn load(cupti: &Library) -> Option<KernelTimes> {
        let names = [
            "cuptiActivityEnable",
            "cuptiActivityDisable",
            "cuptiActivityFlushAll",
            "cuptiActivityGetNextRecord",
            "cuptiActivityRegisterCallbacks",
        ];
        let symbols: Vec<*mut c_void> = names.iter().filter_map(|n| cupti.symbol(n)).collect();
        if symbols.len() != names.len() {
            log_warn!("libcupti has no activity API: CUDA kernels are not timed");
            return None;
        }
        // SAFETY: each symbol is the CUPTI function of that name, whose C
        // signature is the type it is given here.
        let (times, next_record, register) = unsafe {
            (
                KernelTimes {
                    enable: as_fn(symbols[0]),
                    disable: as_fn(symbols[1]),
                    flush_all: as_fn(symbols[2]),
                    in_flight: Mutex::new(0),
                },
                as_fn::<NextRecordFn>(symbols[3]),
                as_fn::<unsafe extern "C" fn(RequestFn, CompleteFn) -> c_int>(symbols[4]),
            )
        };
        let _ = RECORDS.set(Records {
            next_record,
            times: Mutex::new(HashMap::new()),
        });
        // SAFETY: two extern "C" functions of CUPTI's buffer-callback types.
        let r = unsafe { register(buffer_requested, buffer_completed) };
        if r != 0 {
            log_warn!(
                "cuptiActivityRegisterCallbacks failed (CUPTI error {r}): CUDA kernels are not timed"
            );
            return None;
        }
        Some(times)
    }

    /// A captured launch is about to be made: kernel records on.
    pub fn begin(&self) {
        let mut n = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if *n == 0 {
            // SAFETY: a CUPTI call with a valid activity kind.
            let r = unsafe { (self.enable)(KIND_CONCURRENT_KERNEL) };
            if r != 0 {
                log_warn!("cuptiActivityEnable(concurrent kernel) failed (CUPTI error {r})");
            }
        }
        *n += 1;
    }

    /// The captured launch whose callbacks carried `correlation_id` has
    /// completed (its stream synchronised): its kernel's time, from the
    /// flushed records; records off when no other captured launch is in
    /// flight.
    pub fn end(&self, correlation_id: u32) -> Option<u64> {
        // SAFETY: a CUPTI call; it calls back buffer_completed.
        unsafe { (self.flush_all)(FLUSH_FORCED) };
        let mut n = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        if *n == 0 {
            // SAFETY: as in begin.
            unsafe { (self.disable)(KIND_CONCURRENT_KERNEL) };
        }
        drop(n);
        RECORDS
            .get()?
            .times
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&correlation_id)
    }
}

/// CUPTI asks for a buffer to write records into.
unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max: *mut usize) {
    ffi_guard(
        "CUPTI's activity buffer request",
        || {
            let layout = std::alloc::Layout::from_size_align(BUFFER_BYTES, 8)
                .expect("a valid constant layout");
            // SAFETY: a non-zero size.
            let p = unsafe { std::alloc::alloc(layout) };
            // SAFETY: CUPTI's out-pointers.
            unsafe {
                *buffer = p;
                *size = if p.is_null() { 0 } else { BUFFER_BYTES };
                *max = 0;
            }
        },
        || (),
    );
}

/// CUPTI hands back a buffer of `valid` bytes of records: the kernel
/// records' times are kept by correlation id; the buffer is freed.
unsafe extern "C" fn buffer_completed(
    _context: *mut c_void,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    if buffer.is_null() {
        return;
    }
    ffi_guard(
        "CUPTI's activity buffer completion",
        || {
            if let Some(records) = RECORDS.get() {
                // SAFETY: a buffer CUPTI filled with `valid` bytes of records.
                unsafe { records.read(buffer, valid) };
            }
        },
        || (),
    );
    let layout =
        std::alloc::Layout::from_size_align(BUFFER_BYTES, 8).expect("a valid constant layout");
    // SAFETY: allocated by buffer_requested with this layout.
    unsafe { std::alloc::dealloc(buffer, layout) };
}

impl Records {
    /// # Safety
    /// `buffer` holds `valid` bytes of CUPTI activity records.
    unsafe fn read(&self, buffer: *mut u8, valid: usize) {
        let mut record: *mut u8 = std::ptr::null_mut();
        let mut times = self.times.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: CUPTI walks its own buffer; a non-zero status ends it.
        while unsafe { (self.next_record)(buffer, valid, &mut record) } == 0 && !record.is_null() {
            // SAFETY: a record CUPTI returned, inside the buffer.
            let end_of_buffer = unsafe { buffer.add(valid) } as usize;
            if (record as usize) + KERNEL_RECORD_MIN > end_of_buffer {
                break;
            }
            // SAFETY: the record is at least KERNEL_RECORD_MIN bytes (above).
            let bytes = unsafe { std::slice::from_raw_parts(record, KERNEL_RECORD_MIN) };
            if let Some((correlation, ns)) = kernel_time(bytes)
                && times.len() < MAX_KEPT
            {
                times.insert(correlation, ns);
            }
        }
    }
}

/// (correlation id, end − start) of a kernel record's leading bytes;
/// `None` for another kind of record or timestamps out of order.
fn kernel_time(record: &[u8]) -> Option<(u32, u64)> {
    let u32_at = |o: usize| Some(u32::from_le_bytes(record.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(record.get(o..o + 8)?.try_into().ok()?));
    let kind = u32_at(0)?;
    if kind != KIND_CONCURRENT_KERNEL && kind != KIND_KERNEL {
        return None;
    }
    let (start, end) = (u64_at(START_OFFSET)?, u64_at(END_OFFSET)?);
    let correlation = u32_at(CORRELATION_OFFSET)?;
    (end >= start && start != 0).then(|| (correlation, end - start))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, start: u64, end: u64, correlation: u32) -> Vec<u8> {
        let mut r = vec![0u8; 128];
        r[0..4].copy_from_slice(&kind.to_le_bytes());
        r[16..24].copy_from_slice(&start.to_le_bytes());
        r[24..32].copy_from_slice(&end.to_le_bytes());
        r[92..96].copy_from_slice(&correlation.to_le_bytes());
        r
    }

    #[test]
    fn a_kernel_record_gives_its_correlation_and_duration_and_others_nothing() {
        assert_eq!(
            kernel_time(&record(KIND_CONCURRENT_KERNEL, 1_000, 4_500, 77)),
            Some((77, 3_500))
        );
        assert_eq!(kernel_time(&record(KIND_KERNEL, 10, 30, 5)), Some((5, 20)));
        // A memcpy record (kind 1), timestamps out of order, none at all, a
        // record cut short.
        assert_eq!(kernel_time(&record(1, 1_000, 4_500, 77)), None);
        assert_eq!(
            kernel_time(&record(KIND_CONCURRENT_KERNEL, 5_000, 4_500, 77)),
            None
        );
        assert_eq!(kernel_time(&record(KIND_CONCURRENT_KERNEL, 0, 0, 77)), None);
        assert_eq!(
            kernel_time(&record(KIND_CONCURRENT_KERNEL, 1, 2, 3)[..90]),
            None
        );
    }
}

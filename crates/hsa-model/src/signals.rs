//! `amd_signal_t` as the GPU sees it (ROCr's amd_hsa_signal.h, 64 bytes):
//! `kind`@0, `value`@8, `event_mailbox_ptr`@16, `event_id`@24,
//! `start_ts`@32, `end_ts`@40. An `hsa_signal_t` handle is the address of
//! one. Completing a packet decrements `value` by 1 and, for a signal
//! with an event, sets that event: what a GPU does with an end-of-pipe
//! interrupt, through the thunk's `set_event` (in model mode the mailbox
//! address is a placeholder the model must not write).

use crate::device::Shared;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

/// Bytes of an `amd_signal_t`.
pub const SIZE: u64 = 64;
const VALUE: usize = 8;
const EVENT_ID: usize = 24;
const START_TS: usize = 32;
const END_TS: usize = 40;

/// A signal the model may touch: its memory lies in a GPU allocation.
pub struct GpuSignal<'a> {
    gpu: &'a Shared,
    handle: u64,
    base: *mut u8,
}

impl<'a> GpuSignal<'a> {
    /// The signal at `handle`, or Err naming it when its memory is not GPU
    /// memory the model was told of.
    pub fn at(gpu: &'a Shared, handle: u64) -> Result<GpuSignal<'a>, String> {
        let base = gpu
            .at(handle, SIZE)
            .ok_or_else(|| format!("signal 0x{handle:x} is not in memory mapped to the GPU"))?;
        Ok(GpuSignal { gpu, handle, base })
    }

    fn value_cell(&self) -> &AtomicI64 {
        // SAFETY: `base` is 64 bytes of mapped GPU memory (checked by
        // `at`); ROCr aligns signals to 64 bytes, so `value` is aligned.
        unsafe { &*(self.base.add(VALUE) as *const AtomicI64) }
    }

    /// The value, with acquire semantics (a dependency read).
    pub fn load(&self) -> i64 {
        self.value_cell().load(Ordering::Acquire)
    }

    /// Completion: value - 1 with release semantics, then the event (its
    /// id read before the decrement, which may let the waiter destroy the
    /// signal). Beware: ROCr 7.2.4's thunk aborts the process when the
    /// event was destroyed before `set_event` reaches it
    /// ("model_set_event: event_id = N is not allocated"), where a driver
    /// drops such an interrupt; with `HSA_ENABLE_INTERRUPT=0` (what
    /// `--hsa-runtime model` sets) ROCr's signals carry no event and this
    /// never calls it.
    pub fn complete(&self) {
        // SAFETY: as in value_cell; event_id is 4 bytes at 24.
        let event = unsafe { &*(self.base.add(EVENT_ID) as *const AtomicU32) };
        let id = event.load(Ordering::Acquire);
        self.value_cell().fetch_sub(1, Ordering::AcqRel);
        if id != 0 {
            self.gpu.set_event(id);
        }
    }

    /// Records a dispatch's start and end (the GPU's timestamps, which
    /// `hsa_amd_profiling_get_dispatch_time` reads), before completion.
    pub fn set_times(&self, start: u64, end: u64) {
        // SAFETY: as in value_cell; start_ts and end_ts are 8 bytes at 32
        // and 40 of the signal's 64 mapped bytes.
        unsafe {
            (*(self.base.add(START_TS) as *const AtomicU64)).store(start, Ordering::Relaxed);
            (*(self.base.add(END_TS) as *const AtomicU64)).store(end, Ordering::Relaxed);
        }
    }

    pub fn handle(&self) -> u64 {
        self.handle
    }
}

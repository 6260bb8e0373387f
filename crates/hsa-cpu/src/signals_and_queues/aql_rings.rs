//! AQL rings: owns the memory of one ring of AQL packets, its
//! `hsa_queue_t` (the address handed to the application never moves), its
//! read and write indices and its doorbell signal. Used by app queues and
//! by the proxy rings of intercept queues. Knows nothing of who consumes
//! the packets (`packet_processor`) or of the registry (`queues`).

use crate::signals_and_queues::signals::{self, Order, Signal};
use hsa::*;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A ring of AQL packets with its `hsa_queue_t`, indices and doorbell.
pub struct Ring {
    /// Boxed so the address handed to the application never moves.
    queue: Box<hsa_queue_t>,
    slots: *mut AqlPacket,
    layout: std::alloc::Layout,
    pub size: u32,
    pub read_index: AtomicU64,
    pub write_index: AtomicU64,
    pub doorbell: Arc<Signal>,
}

// SAFETY: the ring memory is shared with the application by design; all
// accesses to slots go through atomic headers (hsa::packet) and indices.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

static NEXT_QUEUE_ID: AtomicU64 = AtomicU64::new(1);

impl Ring {
    /// Created as HSA_QUEUE_TYPE_COOPERATIVE: its dispatches run every
    /// group at once (dispatch.rs).
    pub fn cooperative(&self) -> bool {
        self.queue.type_ == HSA_QUEUE_TYPE_COOPERATIVE
    }

    pub fn new(size: u32, type_: hsa_queue_type32_t) -> Option<Ring> {
        let layout = std::alloc::Layout::from_size_align(size as usize * 64, 4096).ok()?;
        // SAFETY: layout has non-zero size (size >= QUEUE_MIN_SIZE slots).
        let slots = unsafe { std::alloc::alloc_zeroed(layout) } as *mut AqlPacket;
        if slots.is_null() {
            return None;
        }
        for i in 0..size as usize {
            // SAFETY: i < size, inside the fresh allocation.
            unsafe { (*slots.add(i)).set_header(packet::header(HSA_PACKET_TYPE_INVALID, false)) };
        }
        let (doorbell_handle, doorbell) = signals::create(0);
        let queue = Box::new(hsa_queue_t {
            type_,
            features: HSA_QUEUE_FEATURE_KERNEL_DISPATCH,
            base_address: slots as *mut c_void,
            doorbell_signal: doorbell_handle,
            size,
            reserved1: 0,
            id: NEXT_QUEUE_ID.fetch_add(1, Ordering::Relaxed),
        });
        Some(Ring {
            queue,
            slots,
            layout,
            size,
            read_index: AtomicU64::new(0),
            write_index: AtomicU64::new(0),
            doorbell,
        })
    }

    /// The queue's id (`hsa_queue_t.id`).
    pub fn id(&self) -> u64 {
        self.queue.id
    }

    pub fn hsa_queue(&self) -> *mut hsa_queue_t {
        &*self.queue as *const hsa_queue_t as *mut hsa_queue_t
    }

    pub fn slot(&self, index: u64) -> *mut AqlPacket {
        // SAFETY: the modulo keeps the slot inside the ring.
        unsafe { self.slots.add((index % self.size as u64) as usize) }
    }

    /// Marks the slot free again (header INVALID, release).
    pub fn invalidate(&self, index: u64) {
        let slot = self.slot(index);
        // SAFETY: slot is a live, aligned packet slot; the header is its first u16.
        unsafe {
            (*(slot as *const std::sync::atomic::AtomicU16)).store(
                packet::header(HSA_PACKET_TYPE_INVALID, false),
                Ordering::Release,
            )
        };
    }

    /// Slots not holding an unconsumed packet.
    pub fn free_slots(&self) -> u64 {
        let w = self.write_index.load(Ordering::Acquire);
        let r = self.read_index.load(Ordering::Acquire);
        (self.size as u64).saturating_sub(w.saturating_sub(r))
    }

    /// Writes all `packets` or none, leaving at least `keep_free` slots free
    /// (the submitter is the only producer: callers serialise on their own
    /// lock), then rings the doorbell.
    pub fn try_submit(&self, packets: &[AqlPacket], keep_free: u64) -> bool {
        let w = self.write_index.load(Ordering::Acquire);
        if packets.len() as u64 + keep_free > self.free_slots() {
            return false;
        }
        self.write_index
            .store(w + packets.len() as u64, Ordering::Release);
        for (i, p) in packets.iter().enumerate() {
            // SAFETY: slots w..w+n are reserved above and free (read index passed them).
            unsafe { packet::publish(self.slot(w + i as u64), p) };
        }
        self.doorbell
            .store((w + packets.len() as u64 - 1) as i64, Order::Release);
        true
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        signals::destroy(self.queue.doorbell_signal);
        // SAFETY: slots was allocated with this layout in Ring::new.
        unsafe { std::alloc::dealloc(self.slots as *mut u8, self.layout) };
    }
}

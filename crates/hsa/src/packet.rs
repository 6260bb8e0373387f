//! AQL packet headers: building them, reading them, and publishing a packet.
//!
//! A packet becomes visible to the packet processor when its 16-bit header is
//! stored with release semantics after the other 62 bytes; this module owns
//! that rule so no crate writes a header by hand.

use crate::types::*;
use std::sync::atomic::{AtomicU16, Ordering};

/// Header with the given type, barrier bit and system-scope fences.
pub const fn header(packet_type: hsa_packet_type_t, barrier: bool) -> u16 {
    (packet_type << HSA_PACKET_HEADER_TYPE)
        | ((barrier as u16) << HSA_PACKET_HEADER_BARRIER)
        | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE)
        | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE)
}

/// `header` with its release fence scope (bits 11-12) raised to SYSTEM and
/// every other bit kept: the packet's writes become visible to the host,
/// to copy engines and to other agents when it completes, not only to
/// later work on its own agent (CLR's `addSystemScope` does the same).
pub const fn with_system_release(header: u16) -> u16 {
    (header & !(0b11 << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE))
        | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE)
}

/// The release fence scope of `header` (NONE, AGENT or SYSTEM).
pub const fn release_scope(header: u16) -> u16 {
    (header >> HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 0b11
}

/// Packet type held in the low 8 bits of a header.
pub const fn packet_type(header: u16) -> hsa_packet_type_t {
    header & 0xff
}

/// Whether the barrier bit (bit 8) is set.
pub const fn has_barrier(header: u16) -> bool {
    header & (1 << HSA_PACKET_HEADER_BARRIER) != 0
}

/// Reads the header of the packet at `slot` with acquire semantics.
///
/// # Safety
/// `slot` must point to a live, 64-byte aligned AQL packet slot.
pub unsafe fn load_header(slot: *const AqlPacket) -> u16 {
    // SAFETY: the header is the first, naturally aligned u16 of the slot.
    unsafe { (*(slot as *const AtomicU16)).load(Ordering::Acquire) }
}

/// Copies `packet` into `slot`, leaving the header for last, then stores the
/// header with release semantics so the processor never sees a torn packet.
///
/// # Safety
/// `slot` must point to a live, 64-byte aligned AQL packet slot that the
/// caller owns (reserved through the write index).
pub unsafe fn publish(slot: *mut AqlPacket, packet: &AqlPacket) {
    // SAFETY: slot is valid for 64 bytes; bytes 2..64 are not read by the
    // processor until the header is published below.
    unsafe {
        std::ptr::copy_nonoverlapping(packet.0.as_ptr().add(2), (slot as *mut u8).add(2), 62);
        let header = u16::from_le_bytes([packet.0[0], packet.0[1]]);
        (*(slot as *const AtomicU16)).store(header, Ordering::Release);
    }
}

impl AqlPacket {
    pub fn header(&self) -> u16 {
        u16::from_le_bytes([self.0[0], self.0[1]])
    }

    pub fn set_header(&mut self, header: u16) {
        self.0[..2].copy_from_slice(&header.to_le_bytes());
    }

    pub fn from_dispatch(p: &hsa_kernel_dispatch_packet_t) -> Self {
        // SAFETY: both are 64-byte plain-data structs.
        unsafe { std::mem::transmute_copy(p) }
    }

    pub fn from_barrier(p: &hsa_barrier_and_packet_t) -> Self {
        // SAFETY: both are 64-byte plain-data structs.
        unsafe { std::mem::transmute_copy(p) }
    }

    pub fn as_dispatch(&self) -> hsa_kernel_dispatch_packet_t {
        // SAFETY: both are 64-byte plain-data structs; any bit pattern is valid.
        unsafe { std::mem::transmute_copy(self) }
    }

    pub fn as_barrier(&self) -> hsa_barrier_and_packet_t {
        // SAFETY: both are 64-byte plain-data structs; any bit pattern is valid.
        unsafe { std::mem::transmute_copy(self) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_encodes_type_barrier_and_system_fences() {
        let h = header(HSA_PACKET_TYPE_BARRIER_AND, true);
        assert_eq!(packet_type(h), HSA_PACKET_TYPE_BARRIER_AND);
        assert!(has_barrier(h));
        assert_eq!(h, 3 | 1 << 8 | 2 << 9 | 2 << 11);
        assert!(!has_barrier(header(HSA_PACKET_TYPE_KERNEL_DISPATCH, false)));
    }

    #[test]
    fn dispatch_round_trips_through_raw_packet() {
        let d = hsa_kernel_dispatch_packet_t {
            header: header(HSA_PACKET_TYPE_KERNEL_DISPATCH, false),
            kernel_object: 0xdead_beef,
            completion_signal: hsa_signal_t { handle: 42 },
            ..Default::default()
        };
        let raw = AqlPacket::from_dispatch(&d);
        assert_eq!(raw.header(), d.header);
        let back = raw.as_dispatch();
        assert_eq!(back.kernel_object, 0xdead_beef);
        assert_eq!(back.completion_signal.handle, 42);
    }
}

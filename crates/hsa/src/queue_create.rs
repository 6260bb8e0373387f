//! `hsa_amd_queue_create`, the descriptor-based batch queue creation of
//! ROCm 10: in no release header up to 7.2.4; declared in rocm-systems'
//! develop branch (hsa_ext_amd.h, interface 1.26; added by rocm-systems
//! PR #6921, 2026) and read here from its copy at commit 41e1945 (August
//! 2026). Its table entry, `hsa_amd_queue_create_fn`, is at byte 704 of
//! that AmdExtTable (data/rocm-abi-tables.json, "develop-2026-08-12"), so
//! a table holds it when its minor_id is at least 712. HIP on ROCm 10
//! creates its compute queues through it, one descriptor per call.
//!
//! The layout (x86-64) is pinned by the tests below against the offsets a
//! compiler gave for that header; the header's rules:
//! - `version` must be [`HSA_AMD_QUEUE_CREATE_DESC_VERSION`]; reserved
//!   fields and `traffic_class` must be 0;
//! - `queue_size_bytes` is a power of two, for compute queues a multiple of
//!   the 64-byte AQL packet (the queue holds size / 64 packets);
//! - on a partial failure, queues already created stay valid, each failed
//!   descriptor's `queue` is NULL, and the first error is returned.

use crate::types::{hsa_agent_t, hsa_queue_t, hsa_queue_type32_t, hsa_status_t};
use std::ffi::c_void;

/// The only descriptor version.
pub const HSA_AMD_QUEUE_CREATE_DESC_VERSION: u16 = 1;
/// `engine_type`: an AQL compute queue (the default).
pub const HSA_AMD_QUEUE_ENGINE_COMPUTE: u8 = 0;
/// `engine_type`: a user-mode SDMA queue.
pub const HSA_AMD_QUEUE_ENGINE_SDMA: u8 = 1;
/// `engine_type`: reserved (AIE); creating one fails.
pub const HSA_AMD_QUEUE_ENGINE_AIE: u8 = 2;
/// `flags`: the ring buffer in the agent's device memory.
pub const HSA_AMD_QUEUE_CREATE_DEVICE_MEM_RING_BUF: u16 = 1 << 0;
/// `flags`: the queue descriptor in fine-grained device memory.
pub const HSA_AMD_QUEUE_CREATE_DEVICE_MEM_QUEUE_DESCRIPTOR: u16 = 1 << 1;
/// `sdma_engine_id`: any engine (round robin).
pub const HSA_AMD_SDMA_ENGINE_ID_ANY: u32 = u32::MAX;
/// `private_segment_size`: the runtime's default.
pub const HSA_AMD_PRIVATE_SEGMENT_SIZE_DEFAULT: u32 = u32::MAX;
/// The highest `hsa_amd_queue_priority_t` (LOW 0, NORMAL 1, HIGH 2).
pub const HSA_AMD_QUEUE_PRIORITY_HIGH: u32 = 2;
/// NORMAL, what a zeroed descriptor does not ask for (0 is LOW).
pub const HSA_AMD_QUEUE_PRIORITY_NORMAL: u32 = 1;

/// The compute arm of the descriptor's engine union.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hsa_amd_compute_queue_params_t {
    pub cu_mask: *const u32,
    pub type_: hsa_queue_type32_t,
    pub private_segment_size: u32,
    /// Bits in `cu_mask`, a multiple of 32; 0: no mask.
    pub cu_mask_count: u32,
    pub reserved: [u32; 3],
}

/// The SDMA arm of the descriptor's engine union.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hsa_amd_sdma_queue_params_t {
    pub sdma_engine_id: u32,
    pub reserved: [u32; 7],
}

/// The descriptor's per-engine parameters (32 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union hsa_amd_queue_engine_params_t {
    pub compute: hsa_amd_compute_queue_params_t,
    pub sdma: hsa_amd_sdma_queue_params_t,
    pub reserved: [u8; 32],
}

/// One queue to create.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct hsa_amd_queue_create_desc_t {
    pub version: u16,
    pub flags: u16,
    pub engine_type: u8,
    pub reserved_header: [u8; 3],
    pub queue_size_bytes: u32,
    /// `hsa_amd_queue_priority_t`.
    pub priority: u32,
    pub callback: Option<unsafe extern "C" fn(hsa_status_t, *mut hsa_queue_t, *mut c_void)>,
    pub callback_data: *mut c_void,
    /// \[out\] the created queue; NULL when this descriptor failed.
    pub queue: *mut hsa_queue_t,
    pub engine: hsa_amd_queue_engine_params_t,
    pub traffic_class: u32,
    pub reserved: [u8; 20],
}

/// `hsa_amd_queue_create(agent, descs, num_descs)`.
pub type HsaAmdQueueCreateFn = unsafe extern "C" fn(
    agent: hsa_agent_t,
    descs: *mut hsa_amd_queue_create_desc_t,
    num_descs: u32,
) -> hsa_status_t;

impl hsa_amd_queue_create_desc_t {
    /// The compute parameters, when this is a well-formed compute
    /// descriptor by the header's rules (`None`: another engine, or a
    /// descriptor the runtime must judge itself).
    pub fn compute(&self) -> Option<hsa_amd_compute_queue_params_t> {
        if self.version != HSA_AMD_QUEUE_CREATE_DESC_VERSION
            || self.engine_type != HSA_AMD_QUEUE_ENGINE_COMPUTE
        {
            return None;
        }
        // SAFETY: every arm is plain data; the compute arm is the one a
        // compute descriptor sets.
        let c = unsafe { self.engine.compute };
        let known_flags = HSA_AMD_QUEUE_CREATE_DEVICE_MEM_RING_BUF
            | HSA_AMD_QUEUE_CREATE_DEVICE_MEM_QUEUE_DESCRIPTOR;
        let well_formed = self.flags & !known_flags == 0
            && self.reserved_header == [0; 3]
            && self.queue_size_bytes.is_power_of_two()
            && self.queue_size_bytes.is_multiple_of(64)
            && self.priority <= HSA_AMD_QUEUE_PRIORITY_HIGH
            && c.type_ <= crate::types::HSA_QUEUE_TYPE_COOPERATIVE
            && c.cu_mask_count.is_multiple_of(32)
            && c.reserved == [0; 3]
            && self.traffic_class == 0
            && self.reserved == [0; 20];
        well_formed.then_some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn the_descriptor_is_laid_out_as_the_rocm_10_header_compiles() {
        // g++ on x86-64 against rocm-systems@41e1945's hsa_ext_amd.h.
        type D = hsa_amd_queue_create_desc_t;
        assert_eq!((size_of::<D>(), align_of::<D>()), (96, 8));
        assert_eq!(
            [
                offset_of!(D, version),
                offset_of!(D, flags),
                offset_of!(D, engine_type),
                offset_of!(D, reserved_header),
                offset_of!(D, queue_size_bytes),
                offset_of!(D, priority),
                offset_of!(D, callback),
                offset_of!(D, callback_data),
                offset_of!(D, queue),
                offset_of!(D, engine),
                offset_of!(D, traffic_class),
                offset_of!(D, reserved),
            ],
            [0, 2, 4, 5, 8, 12, 16, 24, 32, 40, 72, 76]
        );
        type C = hsa_amd_compute_queue_params_t;
        assert_eq!(
            [
                offset_of!(C, cu_mask),
                offset_of!(C, type_),
                offset_of!(C, private_segment_size),
                offset_of!(C, cu_mask_count),
                offset_of!(C, reserved),
            ],
            [0, 8, 12, 16, 20]
        );
        assert_eq!(size_of::<hsa_amd_queue_engine_params_t>(), 32);
        assert_eq!(size_of::<hsa_amd_sdma_queue_params_t>(), 32);
    }

    fn compute_desc(size: u32) -> hsa_amd_queue_create_desc_t {
        // SAFETY: all-zero is a valid descriptor (integers, null pointers).
        let mut d: hsa_amd_queue_create_desc_t = unsafe { std::mem::zeroed() };
        d.version = HSA_AMD_QUEUE_CREATE_DESC_VERSION;
        d.queue_size_bytes = size;
        d
    }

    #[test]
    fn only_a_well_formed_compute_descriptor_has_compute_parameters() {
        assert!(compute_desc(4096).compute().is_some());
        let mut sdma = compute_desc(4096);
        sdma.engine_type = HSA_AMD_QUEUE_ENGINE_SDMA;
        assert!(sdma.compute().is_none());
        for broken in [
            compute_desc(4000),
            compute_desc(32),
            {
                let mut d = compute_desc(4096);
                d.version = 2;
                d
            },
            {
                let mut d = compute_desc(4096);
                d.traffic_class = 1;
                d
            },
            {
                let mut d = compute_desc(4096);
                d.reserved[19] = 1;
                d
            },
        ] {
            assert!(broken.compute().is_none());
        }
    }
}

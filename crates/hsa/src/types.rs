//! HSA ABI types and constants (ROCm 5.2 `hsa.h` / `hsa_ext_amd.h`, x86-64).
//!
//! Owns every struct layout and enum value that crosses the C boundary.
//! Layouts are pinned by `const` assertions at the end of this file.
#![allow(non_camel_case_types)]

use std::ffi::c_void;

pub type hsa_status_t = u32;
pub const HSA_STATUS_SUCCESS: hsa_status_t = 0x0;
pub const HSA_STATUS_INFO_BREAK: hsa_status_t = 0x1;
pub const HSA_STATUS_ERROR: hsa_status_t = 0x1000;
pub const HSA_STATUS_ERROR_INVALID_ARGUMENT: hsa_status_t = 0x1001;
pub const HSA_STATUS_ERROR_INVALID_QUEUE_CREATION: hsa_status_t = 0x1002;
pub const HSA_STATUS_ERROR_INVALID_ALLOCATION: hsa_status_t = 0x1003;
pub const HSA_STATUS_ERROR_INVALID_AGENT: hsa_status_t = 0x1004;
pub const HSA_STATUS_ERROR_INVALID_REGION: hsa_status_t = 0x1005;
pub const HSA_STATUS_ERROR_INVALID_SIGNAL: hsa_status_t = 0x1006;
pub const HSA_STATUS_ERROR_INVALID_QUEUE: hsa_status_t = 0x1007;
pub const HSA_STATUS_ERROR_OUT_OF_RESOURCES: hsa_status_t = 0x1008;
pub const HSA_STATUS_ERROR_INVALID_PACKET_FORMAT: hsa_status_t = 0x1009;
pub const HSA_STATUS_ERROR_RESOURCE_FREE: hsa_status_t = 0x100A;
pub const HSA_STATUS_ERROR_NOT_INITIALIZED: hsa_status_t = 0x100B;
pub const HSA_STATUS_ERROR_REFCOUNT_OVERFLOW: hsa_status_t = 0x100C;
pub const HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS: hsa_status_t = 0x100D;
pub const HSA_STATUS_ERROR_INVALID_INDEX: hsa_status_t = 0x100E;
pub const HSA_STATUS_ERROR_INVALID_ISA: hsa_status_t = 0x100F;
pub const HSA_STATUS_ERROR_INVALID_CODE_OBJECT: hsa_status_t = 0x1010;
pub const HSA_STATUS_ERROR_INVALID_EXECUTABLE: hsa_status_t = 0x1011;
pub const HSA_STATUS_ERROR_FROZEN_EXECUTABLE: hsa_status_t = 0x1012;
pub const HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: hsa_status_t = 0x1013;
pub const HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED: hsa_status_t = 0x1014;
pub const HSA_STATUS_ERROR_VARIABLE_UNDEFINED: hsa_status_t = 0x1015;
pub const HSA_STATUS_ERROR_EXCEPTION: hsa_status_t = 0x1016;
pub const HSA_STATUS_ERROR_INVALID_ISA_NAME: hsa_status_t = 0x1017;
pub const HSA_STATUS_ERROR_INVALID_CODE_SYMBOL: hsa_status_t = 0x1018;
pub const HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL: hsa_status_t = 0x1019;
pub const HSA_STATUS_ERROR_INVALID_FILE: hsa_status_t = 0x1020;
pub const HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER: hsa_status_t = 0x1021;
pub const HSA_STATUS_ERROR_INVALID_CACHE: hsa_status_t = 0x1022;
pub const HSA_STATUS_ERROR_INVALID_WAVEFRONT: hsa_status_t = 0x1023;
pub const HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP: hsa_status_t = 0x1024;
pub const HSA_STATUS_ERROR_INVALID_RUNTIME_STATE: hsa_status_t = 0x1025;
pub const HSA_STATUS_ERROR_FATAL: hsa_status_t = 0x1026;
/// `hsa_ext_amd.h`: a memory pool handle that names no pool (value 40, not 0x10xx).
pub const HSA_STATUS_ERROR_INVALID_MEMORY_POOL: hsa_status_t = 40;

macro_rules! handle_types {
    ($($name:ident),* $(,)?) => {$(
        /// Opaque handle; two handles name the same object iff equal.
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name { pub handle: u64 }
    )*};
}
handle_types!(
    hsa_agent_t,
    hsa_signal_t,
    hsa_region_t,
    hsa_isa_t,
    hsa_executable_t,
    hsa_executable_symbol_t,
    hsa_code_object_reader_t,
    hsa_loaded_code_object_t,
    hsa_amd_memory_pool_t,
);

pub type hsa_signal_value_t = i64;

pub type hsa_system_info_t = u32;
pub const HSA_SYSTEM_INFO_VERSION_MAJOR: hsa_system_info_t = 0;
pub const HSA_SYSTEM_INFO_VERSION_MINOR: hsa_system_info_t = 1;
pub const HSA_SYSTEM_INFO_TIMESTAMP: hsa_system_info_t = 2;
pub const HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY: hsa_system_info_t = 3;
pub const HSA_SYSTEM_INFO_SIGNAL_MAX_WAIT: hsa_system_info_t = 4;
pub const HSA_SYSTEM_INFO_ENDIANNESS: hsa_system_info_t = 5;
pub const HSA_SYSTEM_INFO_MACHINE_MODEL: hsa_system_info_t = 6;

pub type hsa_device_type_t = u32;
pub const HSA_DEVICE_TYPE_CPU: hsa_device_type_t = 0;
pub const HSA_DEVICE_TYPE_GPU: hsa_device_type_t = 1;

pub type hsa_agent_info_t = u32;
pub const HSA_AGENT_INFO_NAME: hsa_agent_info_t = 0;
pub const HSA_AGENT_INFO_VENDOR_NAME: hsa_agent_info_t = 1;
pub const HSA_AGENT_INFO_FEATURE: hsa_agent_info_t = 2;
pub const HSA_AGENT_INFO_MACHINE_MODEL: hsa_agent_info_t = 3;
pub const HSA_AGENT_INFO_PROFILE: hsa_agent_info_t = 4;
pub const HSA_AGENT_INFO_WAVEFRONT_SIZE: hsa_agent_info_t = 6;
pub const HSA_AGENT_INFO_WORKGROUP_MAX_DIM: hsa_agent_info_t = 7;
pub const HSA_AGENT_INFO_WORKGROUP_MAX_SIZE: hsa_agent_info_t = 8;
pub const HSA_AGENT_INFO_GRID_MAX_DIM: hsa_agent_info_t = 9;
pub const HSA_AGENT_INFO_GRID_MAX_SIZE: hsa_agent_info_t = 10;
pub const HSA_AGENT_INFO_QUEUES_MAX: hsa_agent_info_t = 12;
pub const HSA_AGENT_INFO_QUEUE_MIN_SIZE: hsa_agent_info_t = 13;
pub const HSA_AGENT_INFO_QUEUE_MAX_SIZE: hsa_agent_info_t = 14;
pub const HSA_AGENT_INFO_QUEUE_TYPE: hsa_agent_info_t = 15;
pub const HSA_AGENT_INFO_NODE: hsa_agent_info_t = 16;
pub const HSA_AGENT_INFO_DEVICE: hsa_agent_info_t = 17;
pub const HSA_AGENT_INFO_ISA: hsa_agent_info_t = 19;
pub const HSA_AGENT_INFO_VERSION_MAJOR: hsa_agent_info_t = 21;
pub const HSA_AGENT_INFO_VERSION_MINOR: hsa_agent_info_t = 22;

pub type hsa_agent_feature_t = u32;
pub const HSA_AGENT_FEATURE_KERNEL_DISPATCH: hsa_agent_feature_t = 1;
pub const HSA_AGENT_FEATURE_AGENT_DISPATCH: hsa_agent_feature_t = 2;

pub type hsa_profile_t = u32;
pub const HSA_PROFILE_BASE: hsa_profile_t = 0;
pub const HSA_PROFILE_FULL: hsa_profile_t = 1;

pub type hsa_default_float_rounding_mode_t = u32;
pub const HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT: hsa_default_float_rounding_mode_t = 0;
pub const HSA_DEFAULT_FLOAT_ROUNDING_MODE_ZERO: hsa_default_float_rounding_mode_t = 1;
pub const HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR: hsa_default_float_rounding_mode_t = 2;

pub type hsa_signal_condition_t = u32;
pub const HSA_SIGNAL_CONDITION_EQ: hsa_signal_condition_t = 0;
pub const HSA_SIGNAL_CONDITION_NE: hsa_signal_condition_t = 1;
pub const HSA_SIGNAL_CONDITION_LT: hsa_signal_condition_t = 2;
pub const HSA_SIGNAL_CONDITION_GTE: hsa_signal_condition_t = 3;

pub type hsa_wait_state_t = u32;
pub const HSA_WAIT_STATE_BLOCKED: hsa_wait_state_t = 0;
pub const HSA_WAIT_STATE_ACTIVE: hsa_wait_state_t = 1;

pub type hsa_queue_type32_t = u32;
pub const HSA_QUEUE_TYPE_MULTI: hsa_queue_type32_t = 0;
pub const HSA_QUEUE_TYPE_SINGLE: hsa_queue_type32_t = 1;
pub const HSA_QUEUE_TYPE_COOPERATIVE: hsa_queue_type32_t = 2;

pub type hsa_queue_feature_t = u32;
pub const HSA_QUEUE_FEATURE_KERNEL_DISPATCH: hsa_queue_feature_t = 1;
pub const HSA_QUEUE_FEATURE_AGENT_DISPATCH: hsa_queue_feature_t = 2;

/// User-mode queue: a ring of 64-byte AQL packets and a doorbell signal.
#[repr(C)]
#[derive(Debug)]
pub struct hsa_queue_t {
    pub type_: hsa_queue_type32_t,
    pub features: u32,
    pub base_address: *mut c_void,
    pub doorbell_signal: hsa_signal_t,
    /// Number of packets; a power of two.
    pub size: u32,
    pub reserved1: u32,
    pub id: u64,
}

pub type hsa_packet_type_t = u16;
pub const HSA_PACKET_TYPE_VENDOR_SPECIFIC: hsa_packet_type_t = 0;
pub const HSA_PACKET_TYPE_INVALID: hsa_packet_type_t = 1;
pub const HSA_PACKET_TYPE_KERNEL_DISPATCH: hsa_packet_type_t = 2;
pub const HSA_PACKET_TYPE_BARRIER_AND: hsa_packet_type_t = 3;
pub const HSA_PACKET_TYPE_AGENT_DISPATCH: hsa_packet_type_t = 4;
pub const HSA_PACKET_TYPE_BARRIER_OR: hsa_packet_type_t = 5;

pub type hsa_fence_scope_t = u16;
pub const HSA_FENCE_SCOPE_NONE: hsa_fence_scope_t = 0;
pub const HSA_FENCE_SCOPE_AGENT: hsa_fence_scope_t = 1;
pub const HSA_FENCE_SCOPE_SYSTEM: hsa_fence_scope_t = 2;

/// Bit positions and widths inside the 16-bit packet header.
pub const HSA_PACKET_HEADER_TYPE: u16 = 0;
pub const HSA_PACKET_HEADER_BARRIER: u16 = 8;
pub const HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE: u16 = 9;
pub const HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE: u16 = 11;
pub const HSA_PACKET_HEADER_WIDTH_TYPE: u16 = 8;

pub const HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS: u16 = 0;

/// AQL kernel-dispatch packet, 64 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_kernel_dispatch_packet_t {
    pub header: u16,
    pub setup: u16,
    pub workgroup_size_x: u16,
    pub workgroup_size_y: u16,
    pub workgroup_size_z: u16,
    pub reserved0: u16,
    pub grid_size_x: u32,
    pub grid_size_y: u32,
    pub grid_size_z: u32,
    pub private_segment_size: u32,
    pub group_segment_size: u32,
    pub kernel_object: u64,
    pub kernarg_address: *mut c_void,
    pub reserved2: u64,
    pub completion_signal: hsa_signal_t,
}

impl Default for hsa_kernel_dispatch_packet_t {
    fn default() -> Self {
        // SAFETY: every field is an integer, a raw pointer or a handle: all-zero is valid.
        unsafe { std::mem::zeroed() }
    }
}

/// AQL barrier-AND packet (same layout serves barrier-OR), 64 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_barrier_and_packet_t {
    pub header: u16,
    pub reserved0: u16,
    pub reserved1: u32,
    pub dep_signal: [hsa_signal_t; 5],
    pub reserved2: u64,
    pub completion_signal: hsa_signal_t,
}
pub type hsa_barrier_or_packet_t = hsa_barrier_and_packet_t;

/// Any AQL packet as raw bytes (64-byte aligned slot of a queue ring).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct AqlPacket(pub [u8; 64]);

pub type hsa_isa_info_t = u32;
pub const HSA_ISA_INFO_NAME_LENGTH: hsa_isa_info_t = 0;
pub const HSA_ISA_INFO_NAME: hsa_isa_info_t = 1;

pub type hsa_executable_state_t = u32;
pub const HSA_EXECUTABLE_STATE_UNFROZEN: hsa_executable_state_t = 0;
pub const HSA_EXECUTABLE_STATE_FROZEN: hsa_executable_state_t = 1;

pub type hsa_symbol_kind_t = u32;
pub const HSA_SYMBOL_KIND_VARIABLE: hsa_symbol_kind_t = 0;
pub const HSA_SYMBOL_KIND_KERNEL: hsa_symbol_kind_t = 1;
pub const HSA_SYMBOL_KIND_INDIRECT_FUNCTION: hsa_symbol_kind_t = 2;

pub type hsa_executable_symbol_info_t = u32;
pub const HSA_EXECUTABLE_SYMBOL_INFO_TYPE: hsa_executable_symbol_info_t = 0;
pub const HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH: hsa_executable_symbol_info_t = 1;
pub const HSA_EXECUTABLE_SYMBOL_INFO_NAME: hsa_executable_symbol_info_t = 2;
pub const HSA_EXECUTABLE_SYMBOL_INFO_LINKAGE: hsa_executable_symbol_info_t = 5;
pub const HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE: hsa_executable_symbol_info_t = 9;
pub const HSA_EXECUTABLE_SYMBOL_INFO_IS_DEFINITION: hsa_executable_symbol_info_t = 17;
pub const HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS: hsa_executable_symbol_info_t = 21;
pub const HSA_EXECUTABLE_SYMBOL_INFO_AGENT: hsa_executable_symbol_info_t = 20;
pub const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT: hsa_executable_symbol_info_t = 22;
pub const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE: hsa_executable_symbol_info_t = 11;
pub const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT:
    hsa_executable_symbol_info_t = 12;
pub const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE: hsa_executable_symbol_info_t = 13;
pub const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE: hsa_executable_symbol_info_t = 14;

// --- AMD extensions -------------------------------------------------------

pub type hsa_amd_segment_t = u32;
pub const HSA_AMD_SEGMENT_GLOBAL: hsa_amd_segment_t = 0;
pub const HSA_AMD_SEGMENT_READONLY: hsa_amd_segment_t = 1;
pub const HSA_AMD_SEGMENT_PRIVATE: hsa_amd_segment_t = 2;
pub const HSA_AMD_SEGMENT_GROUP: hsa_amd_segment_t = 3;

pub type hsa_amd_memory_pool_global_flag_t = u32;
pub const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT: u32 = 1;
pub const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED: u32 = 2;
pub const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED: u32 = 4;

pub type hsa_amd_memory_pool_info_t = u32;
pub const HSA_AMD_MEMORY_POOL_INFO_SEGMENT: hsa_amd_memory_pool_info_t = 0;
pub const HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS: hsa_amd_memory_pool_info_t = 1;
pub const HSA_AMD_MEMORY_POOL_INFO_SIZE: hsa_amd_memory_pool_info_t = 2;
pub const HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED: hsa_amd_memory_pool_info_t = 5;
pub const HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE: hsa_amd_memory_pool_info_t = 6;
pub const HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT: hsa_amd_memory_pool_info_t = 7;
pub const HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL: hsa_amd_memory_pool_info_t = 15;
pub const HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE: hsa_amd_memory_pool_info_t = 16;

pub type hsa_amd_memory_pool_access_t = u32;
pub const HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED: u32 = 0;
pub const HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT: u32 = 1;
pub const HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT: u32 = 2;

pub type hsa_amd_agent_memory_pool_info_t = u32;
pub const HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS: hsa_amd_agent_memory_pool_info_t = 0;

pub type hsa_amd_pointer_type_t = u32;
pub const HSA_EXT_POINTER_TYPE_UNKNOWN: hsa_amd_pointer_type_t = 0;
pub const HSA_EXT_POINTER_TYPE_HSA: hsa_amd_pointer_type_t = 1;
pub const HSA_EXT_POINTER_TYPE_LOCKED: hsa_amd_pointer_type_t = 2;
pub const HSA_EXT_POINTER_TYPE_GRAPHICS: hsa_amd_pointer_type_t = 3;
pub const HSA_EXT_POINTER_TYPE_IPC: hsa_amd_pointer_type_t = 4;

/// Result of `hsa_amd_pointer_info`; set `size` before the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_snake_case)] // field names as in hsa_ext_amd.h
pub struct hsa_amd_pointer_info_t {
    pub size: u32,
    pub type_: hsa_amd_pointer_type_t,
    pub agentBaseAddress: *mut c_void,
    pub hostBaseAddress: *mut c_void,
    pub sizeInBytes: usize,
    pub userData: *mut c_void,
    pub agentOwner: hsa_agent_t,
    pub global_flags: u32,
}

impl Default for hsa_amd_pointer_info_t {
    fn default() -> Self {
        Self {
            size: std::mem::size_of::<Self>() as u32,
            type_: HSA_EXT_POINTER_TYPE_UNKNOWN,
            agentBaseAddress: std::ptr::null_mut(),
            hostBaseAddress: std::ptr::null_mut(),
            sizeInBytes: 0,
            userData: std::ptr::null_mut(),
            agentOwner: hsa_agent_t::default(),
            global_flags: 0,
        }
    }
}

/// IPC handle of an allocation: 32 opaque bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct hsa_amd_ipc_memory_t {
    pub handle: [u32; 8],
}

/// Kernel start and end, in system-clock ticks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_amd_profiling_dispatch_time_t {
    pub start: u64,
    pub end: u64,
}

/// AMD agent attributes (`hsa_amd_agent_info_t`), read by HIP at start-up.
pub const HSA_AMD_AGENT_INFO_CHIP_ID: hsa_agent_info_t = 0xA000;
pub const HSA_AMD_AGENT_INFO_CACHELINE_SIZE: hsa_agent_info_t = 0xA001;
pub const HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT: hsa_agent_info_t = 0xA002;
pub const HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY: hsa_agent_info_t = 0xA003;
pub const HSA_AMD_AGENT_INFO_PRODUCT_NAME: hsa_agent_info_t = 0xA009;

/// Extension id of the AMD loader table (`hsa_system_get_major_extension_table`).
pub const HSA_EXTENSION_AMD_LOADER: u16 = 0x201;

const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<hsa_queue_t>() == 40);
    assert!(offset_of!(hsa_queue_t, base_address) == 8);
    assert!(offset_of!(hsa_queue_t, doorbell_signal) == 16);
    assert!(offset_of!(hsa_queue_t, size) == 24);
    assert!(offset_of!(hsa_queue_t, id) == 32);
    assert!(size_of::<hsa_kernel_dispatch_packet_t>() == 64);
    assert!(offset_of!(hsa_kernel_dispatch_packet_t, setup) == 2);
    assert!(offset_of!(hsa_kernel_dispatch_packet_t, workgroup_size_x) == 4);
    assert!(offset_of!(hsa_kernel_dispatch_packet_t, grid_size_x) == 12);
    assert!(offset_of!(hsa_kernel_dispatch_packet_t, private_segment_size) == 24);
    assert!(offset_of!(hsa_kernel_dispatch_packet_t, group_segment_size) == 28);
    assert!(offset_of!(hsa_kernel_dispatch_packet_t, kernel_object) == 32);
    assert!(offset_of!(hsa_kernel_dispatch_packet_t, kernarg_address) == 40);
    assert!(offset_of!(hsa_kernel_dispatch_packet_t, completion_signal) == 56);
    assert!(size_of::<hsa_barrier_and_packet_t>() == 64);
    assert!(offset_of!(hsa_barrier_and_packet_t, dep_signal) == 8);
    assert!(offset_of!(hsa_barrier_and_packet_t, completion_signal) == 56);
    assert!(size_of::<AqlPacket>() == 64 && align_of::<AqlPacket>() == 64);
    assert!(size_of::<hsa_amd_pointer_info_t>() == 56);
    assert!(size_of::<hsa_amd_ipc_memory_t>() == 32);
};

// --- GPU system events (`hsa_ext_amd.h` of ROCr 6.2–6.4, AMD interface 1.6;
// the values and layout are unchanged in 7.x) ---

/// `hsa_ext_amd.h`: the status values after HSA_STATUS_ERROR_INVALID_MEMORY_POOL.
pub const HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: hsa_status_t = 41;
pub const HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION: hsa_status_t = 42;
pub const HSA_STATUS_ERROR_MEMORY_FAULT: hsa_status_t = 43;

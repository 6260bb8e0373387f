//! The AMD loader extension's ABI (`hsa_ven_amd_loader.h`, ROCm 5.2, x86-64):
//! the function table `hsa_system_get_major_extension_table` fills for
//! `HSA_EXTENSION_AMD_LOADER` major 1, and the types its functions take.
//!
//! ROCm 5.2 defines the table as a prefix series `1_00` (3 entries, 24 bytes),
//! `1_01` (5, 40), `1_02` (6, 48) and `1_03` (7, 56); a caller passes the size
//! of the one it was compiled against (HIP 5.2: 24) and the runtime copies
//! `min(56, table_length)` bytes.
#![allow(non_camel_case_types)]

use crate::types::*;
use std::ffi::{c_int, c_void};

pub type hsa_file_t = c_int;

pub type hsa_ven_amd_loader_code_object_storage_type_t = u32;
pub const HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_NONE: u32 = 0;
pub const HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_FILE: u32 = 1;
pub const HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_MEMORY: u32 = 2;

/// One loaded memory segment, as `hsa_ven_amd_loader_query_segment_descriptors` reports it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hsa_ven_amd_loader_segment_descriptor_t {
    pub agent: hsa_agent_t,
    pub executable: hsa_executable_t,
    pub code_object_storage_type: hsa_ven_amd_loader_code_object_storage_type_t,
    pub code_object_storage_base: *const c_void,
    pub code_object_storage_size: usize,
    pub code_object_storage_offset: usize,
    pub segment_base: *const c_void,
    pub segment_size: usize,
}

pub type hsa_ven_amd_loader_loaded_code_object_kind_t = u32;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_KIND_PROGRAM: u32 = 1;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_KIND_AGENT: u32 = 2;

pub type hsa_ven_amd_loader_loaded_code_object_info_t = u32;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_EXECUTABLE: u32 = 1;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_KIND: u32 = 2;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_AGENT: u32 = 3;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_TYPE: u32 = 4;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_MEMORY_BASE: u32 = 5;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_MEMORY_SIZE: u32 = 6;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_FILE: u32 = 7;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_DELTA: u32 = 8;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_BASE: u32 = 9;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_SIZE: u32 = 10;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI_LENGTH: u32 = 11;
pub const HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI: u32 = 12;

pub type LoaderExecutableCallback = Option<
    unsafe extern "C" fn(
        executable: hsa_executable_t,
        loaded_code_object: hsa_loaded_code_object_t,
        data: *mut c_void,
    ) -> hsa_status_t,
>;
pub type LoaderIterateExecutablesCallback =
    Option<unsafe extern "C" fn(executable: hsa_executable_t, data: *mut c_void) -> hsa_status_t>;

/// `hsa_ven_amd_loader_1_03_pfn_t`; the 1_00/1_01/1_02 tables are its prefixes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_ven_amd_loader_1_03_pfn_t {
    pub hsa_ven_amd_loader_query_host_address: Option<
        unsafe extern "C" fn(
            device_address: *const c_void,
            host_address: *mut *const c_void,
        ) -> hsa_status_t,
    >,
    pub hsa_ven_amd_loader_query_segment_descriptors: Option<
        unsafe extern "C" fn(
            segment_descriptors: *mut hsa_ven_amd_loader_segment_descriptor_t,
            num_segment_descriptors: *mut usize,
        ) -> hsa_status_t,
    >,
    pub hsa_ven_amd_loader_query_executable: Option<
        unsafe extern "C" fn(
            device_address: *const c_void,
            executable: *mut hsa_executable_t,
        ) -> hsa_status_t,
    >,
    pub hsa_ven_amd_loader_executable_iterate_loaded_code_objects: Option<
        unsafe extern "C" fn(
            executable: hsa_executable_t,
            callback: LoaderExecutableCallback,
            data: *mut c_void,
        ) -> hsa_status_t,
    >,
    pub hsa_ven_amd_loader_loaded_code_object_get_info: Option<
        unsafe extern "C" fn(
            loaded_code_object: hsa_loaded_code_object_t,
            attribute: hsa_ven_amd_loader_loaded_code_object_info_t,
            value: *mut c_void,
        ) -> hsa_status_t,
    >,
    pub hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size: Option<
        unsafe extern "C" fn(
            file: hsa_file_t,
            offset: usize,
            size: usize,
            code_object_reader: *mut hsa_code_object_reader_t,
        ) -> hsa_status_t,
    >,
    pub hsa_ven_amd_loader_iterate_executables: Option<
        unsafe extern "C" fn(
            callback: LoaderIterateExecutablesCallback,
            data: *mut c_void,
        ) -> hsa_status_t,
    >,
}

/// Bytes of the `1_00`, `1_01`, `1_02` and `1_03` tables.
pub const HSA_VEN_AMD_LOADER_TABLE_SIZES: [usize; 4] = [24, 40, 48, 56];

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<hsa_ven_amd_loader_segment_descriptor_t>() == 64);
    assert!(
        offset_of!(
            hsa_ven_amd_loader_segment_descriptor_t,
            code_object_storage_base
        ) == 24
    );
    assert!(size_of::<hsa_ven_amd_loader_1_03_pfn_t>() == 56);
};

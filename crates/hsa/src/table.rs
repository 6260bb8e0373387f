//! The HSA API tables handed to tools (`hsa_api_trace.h`, ROCm 5.2 layout).
//!
//! Owns the exact field order and size of `HsaApiTable`, `CoreApiTable` and
//! `AmdExtTable`, and the static asserts that pin them. Entries every ditto
//! crate calls carry their full C signature (`signatures`); the rest are
//! `RawFn` slots, kept only so that every offset matches ROCm. The entries'
//! names in order are `entry_names`'. Tables are append-only within a major
//! version: never reorder, only add at the end.
#![allow(non_camel_case_types)]

use crate::signatures::*;
use std::ffi::c_void;

/// A table slot whose signature no ditto crate needs. Same size as any
/// other function pointer; calling it is never done through this type.
pub type RawFn = Option<unsafe extern "C" fn()>;

/// `{major_id, minor_id, step_id, reserved}`; `minor_id` is `sizeof` the table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApiTableVersion {
    pub major_id: u32,
    pub minor_id: u32,
    pub step_id: u32,
    pub reserved: u32,
}

impl ApiTableVersion {
    /// A version header (`reserved` is 0).
    pub const fn new(major_id: u32, minor_id: u32, step_id: u32) -> ApiTableVersion {
        ApiTableVersion {
            major_id,
            minor_id,
            step_id,
            reserved: 0,
        }
    }
}

pub const HSA_API_TABLE_MAJOR_VERSION: u32 = 1;
pub const HSA_CORE_API_TABLE_MAJOR_VERSION: u32 = 1;
pub const HSA_AMD_EXT_API_TABLE_MAJOR_VERSION: u32 = 1;
pub const HSA_API_TABLE_STEP_VERSION: u32 = 0;

/// Root table passed to a tool's `OnLoad`.
#[repr(C)]
#[derive(Debug)]
pub struct HsaApiTable {
    pub version: ApiTableVersion,
    pub core_: *mut CoreApiTable,
    pub amd_ext_: *mut AmdExtTable,
    pub finalizer_ext_: *mut c_void,
    pub image_ext_: *mut c_void,
}

/// `CoreApiTable`: 125 entries, 1016 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CoreApiTable {
    pub version: ApiTableVersion,
    pub hsa_init_fn: Option<HsaInitFn>,
    pub hsa_shut_down_fn: Option<HsaShutDownFn>,
    pub hsa_system_get_info_fn: Option<HsaSystemGetInfoFn>,
    pub hsa_system_extension_supported_fn: RawFn,
    pub hsa_system_get_extension_table_fn: RawFn,
    pub hsa_iterate_agents_fn: Option<HsaIterateAgentsFn>,
    pub hsa_agent_get_info_fn: Option<HsaAgentGetInfoFn>,
    pub hsa_queue_create_fn: Option<HsaQueueCreateFn>,
    pub hsa_soft_queue_create_fn: RawFn,
    pub hsa_queue_destroy_fn: Option<HsaQueueDestroyFn>,
    pub hsa_queue_inactivate_fn: RawFn,
    pub hsa_queue_load_read_index_scacquire_fn: Option<HsaQueueLoadReadIndexScacquireFn>,
    pub hsa_queue_load_read_index_relaxed_fn: Option<HsaQueueLoadReadIndexRelaxedFn>,
    pub hsa_queue_load_write_index_scacquire_fn: Option<HsaQueueLoadWriteIndexScacquireFn>,
    pub hsa_queue_load_write_index_relaxed_fn: Option<HsaQueueLoadWriteIndexRelaxedFn>,
    pub hsa_queue_store_write_index_relaxed_fn: Option<HsaQueueStoreWriteIndexRelaxedFn>,
    pub hsa_queue_store_write_index_screlease_fn: Option<HsaQueueStoreWriteIndexScreleaseFn>,
    pub hsa_queue_cas_write_index_scacq_screl_fn: Option<HsaQueueCasWriteIndexScacqScrelFn>,
    pub hsa_queue_cas_write_index_scacquire_fn: Option<HsaQueueCasWriteIndexScacquireFn>,
    pub hsa_queue_cas_write_index_relaxed_fn: Option<HsaQueueCasWriteIndexRelaxedFn>,
    pub hsa_queue_cas_write_index_screlease_fn: Option<HsaQueueCasWriteIndexScreleaseFn>,
    pub hsa_queue_add_write_index_scacq_screl_fn: Option<HsaQueueAddWriteIndexScacqScrelFn>,
    pub hsa_queue_add_write_index_scacquire_fn: Option<HsaQueueAddWriteIndexScacquireFn>,
    pub hsa_queue_add_write_index_relaxed_fn: Option<HsaQueueAddWriteIndexRelaxedFn>,
    pub hsa_queue_add_write_index_screlease_fn: Option<HsaQueueAddWriteIndexScreleaseFn>,
    pub hsa_queue_store_read_index_relaxed_fn: Option<HsaQueueStoreReadIndexRelaxedFn>,
    pub hsa_queue_store_read_index_screlease_fn: Option<HsaQueueStoreReadIndexScreleaseFn>,
    pub hsa_agent_iterate_regions_fn: RawFn,
    pub hsa_region_get_info_fn: RawFn,
    pub hsa_agent_get_exception_policies_fn: RawFn,
    pub hsa_agent_extension_supported_fn: RawFn,
    pub hsa_memory_register_fn: RawFn,
    pub hsa_memory_deregister_fn: RawFn,
    pub hsa_memory_allocate_fn: Option<HsaMemoryAllocateFn>,
    pub hsa_memory_free_fn: Option<HsaMemoryFreeFn>,
    pub hsa_memory_copy_fn: Option<HsaMemoryCopyFn>,
    pub hsa_memory_assign_agent_fn: RawFn,
    pub hsa_signal_create_fn: Option<HsaSignalCreateFn>,
    pub hsa_signal_destroy_fn: Option<HsaSignalDestroyFn>,
    pub hsa_signal_load_relaxed_fn: Option<HsaSignalLoadRelaxedFn>,
    pub hsa_signal_load_scacquire_fn: Option<HsaSignalLoadScacquireFn>,
    pub hsa_signal_store_relaxed_fn: Option<HsaSignalStoreRelaxedFn>,
    pub hsa_signal_store_screlease_fn: Option<HsaSignalStoreScreleaseFn>,
    pub hsa_signal_wait_relaxed_fn: Option<HsaSignalWaitRelaxedFn>,
    pub hsa_signal_wait_scacquire_fn: Option<HsaSignalWaitScacquireFn>,
    pub hsa_signal_and_relaxed_fn: Option<HsaSignalAndRelaxedFn>,
    pub hsa_signal_and_scacquire_fn: Option<HsaSignalAndScacquireFn>,
    pub hsa_signal_and_screlease_fn: Option<HsaSignalAndScreleaseFn>,
    pub hsa_signal_and_scacq_screl_fn: Option<HsaSignalAndScacqScrelFn>,
    pub hsa_signal_or_relaxed_fn: Option<HsaSignalOrRelaxedFn>,
    pub hsa_signal_or_scacquire_fn: Option<HsaSignalOrScacquireFn>,
    pub hsa_signal_or_screlease_fn: Option<HsaSignalOrScreleaseFn>,
    pub hsa_signal_or_scacq_screl_fn: Option<HsaSignalOrScacqScrelFn>,
    pub hsa_signal_xor_relaxed_fn: Option<HsaSignalXorRelaxedFn>,
    pub hsa_signal_xor_scacquire_fn: Option<HsaSignalXorScacquireFn>,
    pub hsa_signal_xor_screlease_fn: Option<HsaSignalXorScreleaseFn>,
    pub hsa_signal_xor_scacq_screl_fn: Option<HsaSignalXorScacqScrelFn>,
    pub hsa_signal_exchange_relaxed_fn: Option<HsaSignalExchangeRelaxedFn>,
    pub hsa_signal_exchange_scacquire_fn: Option<HsaSignalExchangeScacquireFn>,
    pub hsa_signal_exchange_screlease_fn: Option<HsaSignalExchangeScreleaseFn>,
    pub hsa_signal_exchange_scacq_screl_fn: Option<HsaSignalExchangeScacqScrelFn>,
    pub hsa_signal_add_relaxed_fn: Option<HsaSignalAddRelaxedFn>,
    pub hsa_signal_add_scacquire_fn: Option<HsaSignalAddScacquireFn>,
    pub hsa_signal_add_screlease_fn: Option<HsaSignalAddScreleaseFn>,
    pub hsa_signal_add_scacq_screl_fn: Option<HsaSignalAddScacqScrelFn>,
    pub hsa_signal_subtract_relaxed_fn: Option<HsaSignalSubtractRelaxedFn>,
    pub hsa_signal_subtract_scacquire_fn: Option<HsaSignalSubtractScacquireFn>,
    pub hsa_signal_subtract_screlease_fn: Option<HsaSignalSubtractScreleaseFn>,
    pub hsa_signal_subtract_scacq_screl_fn: Option<HsaSignalSubtractScacqScrelFn>,
    pub hsa_signal_cas_relaxed_fn: Option<HsaSignalCasRelaxedFn>,
    pub hsa_signal_cas_scacquire_fn: Option<HsaSignalCasScacquireFn>,
    pub hsa_signal_cas_screlease_fn: Option<HsaSignalCasScreleaseFn>,
    pub hsa_signal_cas_scacq_screl_fn: Option<HsaSignalCasScacqScrelFn>,
    pub hsa_isa_from_name_fn: RawFn,
    pub hsa_isa_get_info_fn: RawFn,
    pub hsa_isa_compatible_fn: RawFn,
    pub hsa_code_object_serialize_fn: RawFn,
    pub hsa_code_object_deserialize_fn: RawFn,
    pub hsa_code_object_destroy_fn: RawFn,
    pub hsa_code_object_get_info_fn: RawFn,
    pub hsa_code_object_get_symbol_fn: RawFn,
    pub hsa_code_symbol_get_info_fn: RawFn,
    pub hsa_code_object_iterate_symbols_fn: RawFn,
    pub hsa_executable_create_fn: RawFn,
    pub hsa_executable_destroy_fn: Option<HsaExecutableDestroyFn>,
    pub hsa_executable_load_code_object_fn: RawFn,
    pub hsa_executable_freeze_fn: Option<HsaExecutableFreezeFn>,
    pub hsa_executable_get_info_fn: RawFn,
    pub hsa_executable_global_variable_define_fn: RawFn,
    pub hsa_executable_agent_global_variable_define_fn: RawFn,
    pub hsa_executable_readonly_variable_define_fn: RawFn,
    pub hsa_executable_validate_fn: RawFn,
    pub hsa_executable_get_symbol_fn: RawFn,
    pub hsa_executable_symbol_get_info_fn: Option<HsaExecutableSymbolGetInfoFn>,
    pub hsa_executable_iterate_symbols_fn: Option<HsaExecutableIterateSymbolsFn>,
    pub hsa_status_string_fn: Option<HsaStatusStringFn>,
    pub hsa_extension_get_name_fn: RawFn,
    pub hsa_system_major_extension_supported_fn: RawFn,
    pub hsa_system_get_major_extension_table_fn: Option<HsaSystemGetMajorExtensionTableFn>,
    pub hsa_agent_major_extension_supported_fn: RawFn,
    pub hsa_cache_get_info_fn: RawFn,
    pub hsa_agent_iterate_caches_fn: RawFn,
    pub hsa_signal_silent_store_relaxed_fn: Option<HsaSignalSilentStoreRelaxedFn>,
    pub hsa_signal_silent_store_screlease_fn: Option<HsaSignalSilentStoreScreleaseFn>,
    pub hsa_signal_group_create_fn: RawFn,
    pub hsa_signal_group_destroy_fn: RawFn,
    pub hsa_signal_group_wait_any_scacquire_fn: RawFn,
    pub hsa_signal_group_wait_any_relaxed_fn: RawFn,
    pub hsa_agent_iterate_isas_fn: Option<HsaAgentIterateIsasFn>,
    pub hsa_isa_get_info_alt_fn: Option<HsaIsaGetInfoAltFn>,
    pub hsa_isa_get_exception_policies_fn: RawFn,
    pub hsa_isa_get_round_method_fn: RawFn,
    pub hsa_wavefront_get_info_fn: RawFn,
    pub hsa_isa_iterate_wavefronts_fn: RawFn,
    pub hsa_code_object_get_symbol_from_name_fn: RawFn,
    pub hsa_code_object_reader_create_from_file_fn: RawFn,
    pub hsa_code_object_reader_create_from_memory_fn: Option<HsaCodeObjectReaderCreateFromMemoryFn>,
    pub hsa_code_object_reader_destroy_fn: Option<HsaCodeObjectReaderDestroyFn>,
    pub hsa_executable_create_alt_fn: Option<HsaExecutableCreateAltFn>,
    pub hsa_executable_load_program_code_object_fn: RawFn,
    pub hsa_executable_load_agent_code_object_fn: Option<HsaExecutableLoadAgentCodeObjectFn>,
    pub hsa_executable_validate_alt_fn: RawFn,
    pub hsa_executable_get_symbol_by_name_fn: Option<HsaExecutableGetSymbolByNameFn>,
    pub hsa_executable_iterate_agent_symbols_fn: RawFn,
    pub hsa_executable_iterate_program_symbols_fn: RawFn,
}

/// `AmdExtTable`: 48 entries, 400 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AmdExtTable {
    pub version: ApiTableVersion,
    pub hsa_amd_coherency_get_type_fn: RawFn,
    pub hsa_amd_coherency_set_type_fn: RawFn,
    pub hsa_amd_profiling_set_profiler_enabled_fn: Option<HsaAmdProfilingSetProfilerEnabledFn>,
    pub hsa_amd_profiling_async_copy_enable_fn: RawFn,
    pub hsa_amd_profiling_get_dispatch_time_fn: Option<HsaAmdProfilingGetDispatchTimeFn>,
    pub hsa_amd_profiling_get_async_copy_time_fn: RawFn,
    pub hsa_amd_profiling_convert_tick_to_system_domain_fn: RawFn,
    pub hsa_amd_signal_async_handler_fn: Option<HsaAmdSignalAsyncHandlerFn>,
    pub hsa_amd_async_function_fn: RawFn,
    pub hsa_amd_signal_wait_any_fn: Option<HsaAmdSignalWaitAnyFn>,
    pub hsa_amd_queue_cu_set_mask_fn: RawFn,
    pub hsa_amd_memory_pool_get_info_fn: Option<HsaAmdMemoryPoolGetInfoFn>,
    pub hsa_amd_agent_iterate_memory_pools_fn: Option<HsaAmdAgentIterateMemoryPoolsFn>,
    pub hsa_amd_memory_pool_allocate_fn: Option<HsaAmdMemoryPoolAllocateFn>,
    pub hsa_amd_memory_pool_free_fn: Option<HsaAmdMemoryPoolFreeFn>,
    pub hsa_amd_memory_async_copy_fn: Option<HsaAmdMemoryAsyncCopyFn>,
    pub hsa_amd_agent_memory_pool_get_info_fn: Option<HsaAmdAgentMemoryPoolGetInfoFn>,
    pub hsa_amd_agents_allow_access_fn: Option<HsaAmdAgentsAllowAccessFn>,
    pub hsa_amd_memory_pool_can_migrate_fn: RawFn,
    pub hsa_amd_memory_migrate_fn: RawFn,
    pub hsa_amd_memory_lock_fn: Option<HsaAmdMemoryLockFn>,
    pub hsa_amd_memory_unlock_fn: Option<HsaAmdMemoryUnlockFn>,
    pub hsa_amd_memory_fill_fn: RawFn,
    pub hsa_amd_interop_map_buffer_fn: RawFn,
    pub hsa_amd_interop_unmap_buffer_fn: RawFn,
    pub hsa_amd_image_create_fn: RawFn,
    pub hsa_amd_pointer_info_fn: Option<HsaAmdPointerInfoFn>,
    pub hsa_amd_pointer_info_set_userdata_fn: RawFn,
    pub hsa_amd_ipc_memory_create_fn: Option<HsaAmdIpcMemoryCreateFn>,
    pub hsa_amd_ipc_memory_attach_fn: Option<HsaAmdIpcMemoryAttachFn>,
    pub hsa_amd_ipc_memory_detach_fn: Option<HsaAmdIpcMemoryDetachFn>,
    pub hsa_amd_signal_create_fn: Option<HsaAmdSignalCreateFn>,
    pub hsa_amd_ipc_signal_create_fn: RawFn,
    pub hsa_amd_ipc_signal_attach_fn: RawFn,
    pub hsa_amd_register_system_event_handler_fn: RawFn,
    pub hsa_amd_queue_intercept_create_fn: Option<HsaAmdQueueInterceptCreateFn>,
    pub hsa_amd_queue_intercept_register_fn: Option<HsaAmdQueueInterceptRegisterFn>,
    pub hsa_amd_queue_set_priority_fn: RawFn,
    pub hsa_amd_memory_async_copy_rect_fn: RawFn,
    pub hsa_amd_runtime_queue_create_register_fn: RawFn,
    pub hsa_amd_memory_lock_to_pool_fn: Option<HsaAmdMemoryLockToPoolFn>,
    pub hsa_amd_register_deallocation_callback_fn: RawFn,
    pub hsa_amd_deregister_deallocation_callback_fn: RawFn,
    pub hsa_amd_signal_value_pointer_fn: RawFn,
    pub hsa_amd_svm_attributes_set_fn: RawFn,
    pub hsa_amd_svm_attributes_get_fn: RawFn,
    pub hsa_amd_svm_prefetch_async_fn: RawFn,
    pub hsa_amd_queue_cu_get_mask_fn: RawFn,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<HsaApiTable>() == 48);
    assert!(offset_of!(HsaApiTable, core_) == 16);
    assert!(offset_of!(HsaApiTable, amd_ext_) == 24);
    assert!(size_of::<CoreApiTable>() == 1016);
    assert!(offset_of!(CoreApiTable, hsa_queue_create_fn) == 72);
    assert!(offset_of!(CoreApiTable, hsa_executable_symbol_get_info_fn) == 760);
    assert!(size_of::<AmdExtTable>() == 400);
    assert!(offset_of!(AmdExtTable, hsa_amd_pointer_info_fn) == 224);
    assert!(offset_of!(AmdExtTable, hsa_amd_ipc_memory_create_fn) == 240);
    assert!(offset_of!(AmdExtTable, hsa_amd_ipc_memory_attach_fn) == 248);
    assert!(offset_of!(AmdExtTable, hsa_amd_ipc_memory_detach_fn) == 256);
    assert!(offset_of!(AmdExtTable, hsa_amd_queue_intercept_create_fn) == 296);
    assert!(offset_of!(AmdExtTable, hsa_amd_queue_intercept_register_fn) == 304);
};

//! The HSA API tables handed to tools (`hsa_api_trace.h`, ROCm 5.2 layout).
//!
//! Owns the exact field order and size of `HsaApiTable`, `CoreApiTable` and
//! `AmdExtTable`. Entries every ditto crate calls carry their full C
//! signature; the rest are `RawFn` slots, kept only so that every offset
//! matches ROCm. Tables are append-only within a major version: never
//! reorder, only add at the end.
#![allow(non_camel_case_types)]

use crate::types::*;
use std::ffi::{c_char, c_int, c_void};

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

/// `typedef void (*hsa_amd_queue_intercept_packet_writer)(const void* pkts, uint64_t pkt_count)`.
pub type InterceptPacketWriter = Option<unsafe extern "C" fn(pkts: *const c_void, pkt_count: u64)>;
/// `hsa_amd_queue_intercept_handler`: one packet per call for the outermost interceptor.
pub type InterceptHandler = Option<
    unsafe extern "C" fn(
        pkts: *const c_void,
        pkt_count: u64,
        user_pkt_index: u64,
        data: *mut c_void,
        writer: InterceptPacketWriter,
    ),
>;
/// Queue error callback of `hsa_queue_create`.
pub type QueueErrorCallback =
    Option<unsafe extern "C" fn(status: hsa_status_t, source: *mut hsa_queue_t, data: *mut c_void)>;

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

// Typed signatures of the entries ditto uses.
pub type HsaInitFn = unsafe extern "C" fn() -> hsa_status_t;
pub type HsaShutDownFn = unsafe extern "C" fn() -> hsa_status_t;
pub type HsaSystemGetInfoFn =
    unsafe extern "C" fn(attribute: hsa_system_info_t, value: *mut c_void) -> hsa_status_t;
pub type HsaIterateAgentsFn = unsafe extern "C" fn(
    callback: Option<unsafe extern "C" fn(agent: hsa_agent_t, data: *mut c_void) -> hsa_status_t>,
    data: *mut c_void,
) -> hsa_status_t;
pub type HsaAgentGetInfoFn = unsafe extern "C" fn(
    agent: hsa_agent_t,
    attribute: hsa_agent_info_t,
    value: *mut c_void,
) -> hsa_status_t;
pub type HsaQueueCreateFn = unsafe extern "C" fn(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    callback: QueueErrorCallback,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t;
pub type HsaQueueDestroyFn = unsafe extern "C" fn(queue: *mut hsa_queue_t) -> hsa_status_t;
pub type HsaQueueLoadReadIndexScacquireFn = unsafe extern "C" fn(queue: *const hsa_queue_t) -> u64;
pub type HsaQueueLoadReadIndexRelaxedFn = unsafe extern "C" fn(queue: *const hsa_queue_t) -> u64;
pub type HsaQueueLoadWriteIndexScacquireFn = unsafe extern "C" fn(queue: *const hsa_queue_t) -> u64;
pub type HsaQueueLoadWriteIndexRelaxedFn = unsafe extern "C" fn(queue: *const hsa_queue_t) -> u64;
pub type HsaQueueStoreWriteIndexRelaxedFn =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64);
pub type HsaQueueStoreWriteIndexScreleaseFn =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64);
pub type HsaQueueCasWriteIndexScacqScrelFn =
    unsafe extern "C" fn(queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
pub type HsaQueueCasWriteIndexScacquireFn =
    unsafe extern "C" fn(queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
pub type HsaQueueCasWriteIndexRelaxedFn =
    unsafe extern "C" fn(queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
pub type HsaQueueCasWriteIndexScreleaseFn =
    unsafe extern "C" fn(queue: *const hsa_queue_t, expected: u64, value: u64) -> u64;
pub type HsaQueueAddWriteIndexScacqScrelFn =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64) -> u64;
pub type HsaQueueAddWriteIndexScacquireFn =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64) -> u64;
pub type HsaQueueAddWriteIndexRelaxedFn =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64) -> u64;
pub type HsaQueueAddWriteIndexScreleaseFn =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64) -> u64;
pub type HsaQueueStoreReadIndexRelaxedFn =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64);
pub type HsaQueueStoreReadIndexScreleaseFn =
    unsafe extern "C" fn(queue: *const hsa_queue_t, value: u64);
pub type HsaMemoryAllocateFn =
    unsafe extern "C" fn(region: hsa_region_t, size: usize, ptr: *mut *mut c_void) -> hsa_status_t;
pub type HsaMemoryFreeFn = unsafe extern "C" fn(ptr: *mut c_void) -> hsa_status_t;
pub type HsaMemoryCopyFn =
    unsafe extern "C" fn(dst: *mut c_void, src: *const c_void, size: usize) -> hsa_status_t;
pub type HsaSignalCreateFn = unsafe extern "C" fn(
    initial_value: hsa_signal_value_t,
    num_consumers: u32,
    consumers: *const hsa_agent_t,
    signal: *mut hsa_signal_t,
) -> hsa_status_t;
pub type HsaSignalDestroyFn = unsafe extern "C" fn(signal: hsa_signal_t) -> hsa_status_t;
pub type HsaSignalLoadRelaxedFn = unsafe extern "C" fn(signal: hsa_signal_t) -> hsa_signal_value_t;
pub type HsaSignalLoadScacquireFn =
    unsafe extern "C" fn(signal: hsa_signal_t) -> hsa_signal_value_t;
pub type HsaSignalStoreRelaxedFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalStoreScreleaseFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalWaitRelaxedFn = unsafe extern "C" fn(
    signal: hsa_signal_t,
    condition: hsa_signal_condition_t,
    compare_value: hsa_signal_value_t,
    timeout_hint: u64,
    wait_state_hint: hsa_wait_state_t,
) -> hsa_signal_value_t;
pub type HsaSignalWaitScacquireFn = unsafe extern "C" fn(
    signal: hsa_signal_t,
    condition: hsa_signal_condition_t,
    compare_value: hsa_signal_value_t,
    timeout_hint: u64,
    wait_state_hint: hsa_wait_state_t,
) -> hsa_signal_value_t;
pub type HsaSignalAndRelaxedFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalAndScacquireFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalAndScreleaseFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalAndScacqScrelFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalOrRelaxedFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalOrScacquireFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalOrScreleaseFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalOrScacqScrelFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalXorRelaxedFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalXorScacquireFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalXorScreleaseFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalXorScacqScrelFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalExchangeRelaxedFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
pub type HsaSignalExchangeScacquireFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
pub type HsaSignalExchangeScreleaseFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
pub type HsaSignalExchangeScacqScrelFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t) -> hsa_signal_value_t;
pub type HsaSignalAddRelaxedFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalAddScacquireFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalAddScreleaseFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalAddScacqScrelFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalSubtractRelaxedFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalSubtractScacquireFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalSubtractScreleaseFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalSubtractScacqScrelFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalCasRelaxedFn = unsafe extern "C" fn(
    signal: hsa_signal_t,
    expected: hsa_signal_value_t,
    value: hsa_signal_value_t,
) -> hsa_signal_value_t;
pub type HsaSignalCasScacquireFn = unsafe extern "C" fn(
    signal: hsa_signal_t,
    expected: hsa_signal_value_t,
    value: hsa_signal_value_t,
) -> hsa_signal_value_t;
pub type HsaSignalCasScreleaseFn = unsafe extern "C" fn(
    signal: hsa_signal_t,
    expected: hsa_signal_value_t,
    value: hsa_signal_value_t,
) -> hsa_signal_value_t;
pub type HsaSignalCasScacqScrelFn = unsafe extern "C" fn(
    signal: hsa_signal_t,
    expected: hsa_signal_value_t,
    value: hsa_signal_value_t,
) -> hsa_signal_value_t;
pub type HsaExecutableDestroyFn =
    unsafe extern "C" fn(executable: hsa_executable_t) -> hsa_status_t;
pub type HsaExecutableFreezeFn =
    unsafe extern "C" fn(executable: hsa_executable_t, options: *const c_char) -> hsa_status_t;
pub type HsaExecutableSymbolGetInfoFn = unsafe extern "C" fn(
    symbol: hsa_executable_symbol_t,
    attribute: hsa_executable_symbol_info_t,
    value: *mut c_void,
) -> hsa_status_t;
pub type HsaExecutableIterateSymbolsFn = unsafe extern "C" fn(
    executable: hsa_executable_t,
    callback: Option<
        unsafe extern "C" fn(
            exec: hsa_executable_t,
            symbol: hsa_executable_symbol_t,
            data: *mut c_void,
        ) -> hsa_status_t,
    >,
    data: *mut c_void,
) -> hsa_status_t;
pub type HsaStatusStringFn =
    unsafe extern "C" fn(status: hsa_status_t, status_string: *mut *const c_char) -> hsa_status_t;
pub type HsaSystemGetMajorExtensionTableFn = unsafe extern "C" fn(
    extension: u16,
    version_major: u16,
    table_length: usize,
    table: *mut c_void,
) -> hsa_status_t;
pub type HsaSignalSilentStoreRelaxedFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaSignalSilentStoreScreleaseFn =
    unsafe extern "C" fn(signal: hsa_signal_t, value: hsa_signal_value_t);
pub type HsaAgentIterateIsasFn = unsafe extern "C" fn(
    agent: hsa_agent_t,
    callback: Option<unsafe extern "C" fn(isa: hsa_isa_t, data: *mut c_void) -> hsa_status_t>,
    data: *mut c_void,
) -> hsa_status_t;
pub type HsaIsaGetInfoAltFn = unsafe extern "C" fn(
    isa: hsa_isa_t,
    attribute: hsa_isa_info_t,
    value: *mut c_void,
) -> hsa_status_t;
pub type HsaCodeObjectReaderCreateFromMemoryFn = unsafe extern "C" fn(
    code_object: *const c_void,
    size: usize,
    reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t;
pub type HsaCodeObjectReaderDestroyFn =
    unsafe extern "C" fn(reader: hsa_code_object_reader_t) -> hsa_status_t;
pub type HsaExecutableCreateAltFn = unsafe extern "C" fn(
    profile: hsa_profile_t,
    default_float_rounding_mode: hsa_default_float_rounding_mode_t,
    options: *const c_char,
    executable: *mut hsa_executable_t,
) -> hsa_status_t;
pub type HsaExecutableLoadAgentCodeObjectFn = unsafe extern "C" fn(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    reader: hsa_code_object_reader_t,
    options: *const c_char,
    loaded_code_object: *mut hsa_loaded_code_object_t,
) -> hsa_status_t;
pub type HsaExecutableGetSymbolByNameFn = unsafe extern "C" fn(
    executable: hsa_executable_t,
    symbol_name: *const c_char,
    agent: *const hsa_agent_t,
    symbol: *mut hsa_executable_symbol_t,
) -> hsa_status_t;
pub type HsaAmdProfilingSetProfilerEnabledFn =
    unsafe extern "C" fn(queue: *mut hsa_queue_t, enable: c_int) -> hsa_status_t;
pub type HsaAmdProfilingGetDispatchTimeFn = unsafe extern "C" fn(
    agent: hsa_agent_t,
    signal: hsa_signal_t,
    time: *mut hsa_amd_profiling_dispatch_time_t,
) -> hsa_status_t;
/// `hsa_amd_signal_handler`: return true to stay registered.
pub type SignalHandler =
    Option<unsafe extern "C" fn(value: hsa_signal_value_t, arg: *mut c_void) -> bool>;
pub type HsaAmdSignalAsyncHandlerFn = unsafe extern "C" fn(
    signal: hsa_signal_t,
    cond: hsa_signal_condition_t,
    value: hsa_signal_value_t,
    handler: SignalHandler,
    arg: *mut c_void,
) -> hsa_status_t;
pub type HsaAmdSignalWaitAnyFn = unsafe extern "C" fn(
    signal_count: u32,
    signals: *mut hsa_signal_t,
    conds: *mut hsa_signal_condition_t,
    values: *mut hsa_signal_value_t,
    timeout_hint: u64,
    wait_hint: hsa_wait_state_t,
    satisfying_value: *mut hsa_signal_value_t,
) -> u32;
pub type HsaAmdMemoryPoolGetInfoFn = unsafe extern "C" fn(
    pool: hsa_amd_memory_pool_t,
    attribute: hsa_amd_memory_pool_info_t,
    value: *mut c_void,
) -> hsa_status_t;
pub type HsaAmdAgentIterateMemoryPoolsFn = unsafe extern "C" fn(
    agent: hsa_agent_t,
    callback: Option<
        unsafe extern "C" fn(pool: hsa_amd_memory_pool_t, data: *mut c_void) -> hsa_status_t,
    >,
    data: *mut c_void,
) -> hsa_status_t;
pub type HsaAmdMemoryPoolAllocateFn = unsafe extern "C" fn(
    pool: hsa_amd_memory_pool_t,
    size: usize,
    flags: u32,
    ptr: *mut *mut c_void,
) -> hsa_status_t;
pub type HsaAmdMemoryPoolFreeFn = unsafe extern "C" fn(ptr: *mut c_void) -> hsa_status_t;
pub type HsaAmdMemoryAsyncCopyFn = unsafe extern "C" fn(
    dst: *mut c_void,
    dst_agent: hsa_agent_t,
    src: *const c_void,
    src_agent: hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
) -> hsa_status_t;
pub type HsaAmdAgentMemoryPoolGetInfoFn = unsafe extern "C" fn(
    agent: hsa_agent_t,
    pool: hsa_amd_memory_pool_t,
    attribute: hsa_amd_agent_memory_pool_info_t,
    value: *mut c_void,
) -> hsa_status_t;
pub type HsaAmdAgentsAllowAccessFn = unsafe extern "C" fn(
    num_agents: u32,
    agents: *const hsa_agent_t,
    flags: *const u32,
    ptr: *const c_void,
) -> hsa_status_t;
pub type HsaAmdMemoryLockFn = unsafe extern "C" fn(
    host_ptr: *mut c_void,
    size: usize,
    agents: *mut hsa_agent_t,
    num_agent: c_int,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t;
pub type HsaAmdMemoryUnlockFn = unsafe extern "C" fn(host_ptr: *mut c_void) -> hsa_status_t;
pub type HsaAmdPointerInfoFn = unsafe extern "C" fn(
    ptr: *const c_void,
    info: *mut hsa_amd_pointer_info_t,
    alloc: Option<unsafe extern "C" fn(usize) -> *mut c_void>,
    num_agents_accessible: *mut u32,
    accessible: *mut *mut hsa_agent_t,
) -> hsa_status_t;
pub type HsaAmdIpcMemoryCreateFn = unsafe extern "C" fn(
    ptr: *mut c_void,
    len: usize,
    handle: *mut hsa_amd_ipc_memory_t,
) -> hsa_status_t;
pub type HsaAmdIpcMemoryAttachFn = unsafe extern "C" fn(
    handle: *const hsa_amd_ipc_memory_t,
    len: usize,
    num_agents: u32,
    mapping_agents: *const hsa_agent_t,
    mapped_ptr: *mut *mut c_void,
) -> hsa_status_t;
pub type HsaAmdIpcMemoryDetachFn = unsafe extern "C" fn(mapped_ptr: *mut c_void) -> hsa_status_t;
pub type HsaAmdSignalCreateFn = unsafe extern "C" fn(
    initial_value: hsa_signal_value_t,
    num_consumers: u32,
    consumers: *const hsa_agent_t,
    attributes: u64,
    signal: *mut hsa_signal_t,
) -> hsa_status_t;
pub type HsaAmdQueueInterceptCreateFn = unsafe extern "C" fn(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    callback: QueueErrorCallback,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t;
pub type HsaAmdQueueInterceptRegisterFn = unsafe extern "C" fn(
    queue: *mut hsa_queue_t,
    callback: InterceptHandler,
    user_data: *mut c_void,
) -> hsa_status_t;
pub type HsaAmdMemoryLockToPoolFn = unsafe extern "C" fn(
    host_ptr: *mut c_void,
    size: usize,
    agents: *mut hsa_agent_t,
    num_agent: c_int,
    pool: hsa_amd_memory_pool_t,
    flags: u32,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t;

/// Every entry of `CoreApiTable` in order.
pub const CORE_API_TABLE_ENTRIES: &[&str] = &[
    "hsa_init_fn",
    "hsa_shut_down_fn",
    "hsa_system_get_info_fn",
    "hsa_system_extension_supported_fn",
    "hsa_system_get_extension_table_fn",
    "hsa_iterate_agents_fn",
    "hsa_agent_get_info_fn",
    "hsa_queue_create_fn",
    "hsa_soft_queue_create_fn",
    "hsa_queue_destroy_fn",
    "hsa_queue_inactivate_fn",
    "hsa_queue_load_read_index_scacquire_fn",
    "hsa_queue_load_read_index_relaxed_fn",
    "hsa_queue_load_write_index_scacquire_fn",
    "hsa_queue_load_write_index_relaxed_fn",
    "hsa_queue_store_write_index_relaxed_fn",
    "hsa_queue_store_write_index_screlease_fn",
    "hsa_queue_cas_write_index_scacq_screl_fn",
    "hsa_queue_cas_write_index_scacquire_fn",
    "hsa_queue_cas_write_index_relaxed_fn",
    "hsa_queue_cas_write_index_screlease_fn",
    "hsa_queue_add_write_index_scacq_screl_fn",
    "hsa_queue_add_write_index_scacquire_fn",
    "hsa_queue_add_write_index_relaxed_fn",
    "hsa_queue_add_write_index_screlease_fn",
    "hsa_queue_store_read_index_relaxed_fn",
    "hsa_queue_store_read_index_screlease_fn",
    "hsa_agent_iterate_regions_fn",
    "hsa_region_get_info_fn",
    "hsa_agent_get_exception_policies_fn",
    "hsa_agent_extension_supported_fn",
    "hsa_memory_register_fn",
    "hsa_memory_deregister_fn",
    "hsa_memory_allocate_fn",
    "hsa_memory_free_fn",
    "hsa_memory_copy_fn",
    "hsa_memory_assign_agent_fn",
    "hsa_signal_create_fn",
    "hsa_signal_destroy_fn",
    "hsa_signal_load_relaxed_fn",
    "hsa_signal_load_scacquire_fn",
    "hsa_signal_store_relaxed_fn",
    "hsa_signal_store_screlease_fn",
    "hsa_signal_wait_relaxed_fn",
    "hsa_signal_wait_scacquire_fn",
    "hsa_signal_and_relaxed_fn",
    "hsa_signal_and_scacquire_fn",
    "hsa_signal_and_screlease_fn",
    "hsa_signal_and_scacq_screl_fn",
    "hsa_signal_or_relaxed_fn",
    "hsa_signal_or_scacquire_fn",
    "hsa_signal_or_screlease_fn",
    "hsa_signal_or_scacq_screl_fn",
    "hsa_signal_xor_relaxed_fn",
    "hsa_signal_xor_scacquire_fn",
    "hsa_signal_xor_screlease_fn",
    "hsa_signal_xor_scacq_screl_fn",
    "hsa_signal_exchange_relaxed_fn",
    "hsa_signal_exchange_scacquire_fn",
    "hsa_signal_exchange_screlease_fn",
    "hsa_signal_exchange_scacq_screl_fn",
    "hsa_signal_add_relaxed_fn",
    "hsa_signal_add_scacquire_fn",
    "hsa_signal_add_screlease_fn",
    "hsa_signal_add_scacq_screl_fn",
    "hsa_signal_subtract_relaxed_fn",
    "hsa_signal_subtract_scacquire_fn",
    "hsa_signal_subtract_screlease_fn",
    "hsa_signal_subtract_scacq_screl_fn",
    "hsa_signal_cas_relaxed_fn",
    "hsa_signal_cas_scacquire_fn",
    "hsa_signal_cas_screlease_fn",
    "hsa_signal_cas_scacq_screl_fn",
    "hsa_isa_from_name_fn",
    "hsa_isa_get_info_fn",
    "hsa_isa_compatible_fn",
    "hsa_code_object_serialize_fn",
    "hsa_code_object_deserialize_fn",
    "hsa_code_object_destroy_fn",
    "hsa_code_object_get_info_fn",
    "hsa_code_object_get_symbol_fn",
    "hsa_code_symbol_get_info_fn",
    "hsa_code_object_iterate_symbols_fn",
    "hsa_executable_create_fn",
    "hsa_executable_destroy_fn",
    "hsa_executable_load_code_object_fn",
    "hsa_executable_freeze_fn",
    "hsa_executable_get_info_fn",
    "hsa_executable_global_variable_define_fn",
    "hsa_executable_agent_global_variable_define_fn",
    "hsa_executable_readonly_variable_define_fn",
    "hsa_executable_validate_fn",
    "hsa_executable_get_symbol_fn",
    "hsa_executable_symbol_get_info_fn",
    "hsa_executable_iterate_symbols_fn",
    "hsa_status_string_fn",
    "hsa_extension_get_name_fn",
    "hsa_system_major_extension_supported_fn",
    "hsa_system_get_major_extension_table_fn",
    "hsa_agent_major_extension_supported_fn",
    "hsa_cache_get_info_fn",
    "hsa_agent_iterate_caches_fn",
    "hsa_signal_silent_store_relaxed_fn",
    "hsa_signal_silent_store_screlease_fn",
    "hsa_signal_group_create_fn",
    "hsa_signal_group_destroy_fn",
    "hsa_signal_group_wait_any_scacquire_fn",
    "hsa_signal_group_wait_any_relaxed_fn",
    "hsa_agent_iterate_isas_fn",
    "hsa_isa_get_info_alt_fn",
    "hsa_isa_get_exception_policies_fn",
    "hsa_isa_get_round_method_fn",
    "hsa_wavefront_get_info_fn",
    "hsa_isa_iterate_wavefronts_fn",
    "hsa_code_object_get_symbol_from_name_fn",
    "hsa_code_object_reader_create_from_file_fn",
    "hsa_code_object_reader_create_from_memory_fn",
    "hsa_code_object_reader_destroy_fn",
    "hsa_executable_create_alt_fn",
    "hsa_executable_load_program_code_object_fn",
    "hsa_executable_load_agent_code_object_fn",
    "hsa_executable_validate_alt_fn",
    "hsa_executable_get_symbol_by_name_fn",
    "hsa_executable_iterate_agent_symbols_fn",
    "hsa_executable_iterate_program_symbols_fn",
];
/// Every entry of `AmdExtTable` in order.
pub const AMD_EXT_TABLE_ENTRIES: &[&str] = &[
    "hsa_amd_coherency_get_type_fn",
    "hsa_amd_coherency_set_type_fn",
    "hsa_amd_profiling_set_profiler_enabled_fn",
    "hsa_amd_profiling_async_copy_enable_fn",
    "hsa_amd_profiling_get_dispatch_time_fn",
    "hsa_amd_profiling_get_async_copy_time_fn",
    "hsa_amd_profiling_convert_tick_to_system_domain_fn",
    "hsa_amd_signal_async_handler_fn",
    "hsa_amd_async_function_fn",
    "hsa_amd_signal_wait_any_fn",
    "hsa_amd_queue_cu_set_mask_fn",
    "hsa_amd_memory_pool_get_info_fn",
    "hsa_amd_agent_iterate_memory_pools_fn",
    "hsa_amd_memory_pool_allocate_fn",
    "hsa_amd_memory_pool_free_fn",
    "hsa_amd_memory_async_copy_fn",
    "hsa_amd_agent_memory_pool_get_info_fn",
    "hsa_amd_agents_allow_access_fn",
    "hsa_amd_memory_pool_can_migrate_fn",
    "hsa_amd_memory_migrate_fn",
    "hsa_amd_memory_lock_fn",
    "hsa_amd_memory_unlock_fn",
    "hsa_amd_memory_fill_fn",
    "hsa_amd_interop_map_buffer_fn",
    "hsa_amd_interop_unmap_buffer_fn",
    "hsa_amd_image_create_fn",
    "hsa_amd_pointer_info_fn",
    "hsa_amd_pointer_info_set_userdata_fn",
    "hsa_amd_ipc_memory_create_fn",
    "hsa_amd_ipc_memory_attach_fn",
    "hsa_amd_ipc_memory_detach_fn",
    "hsa_amd_signal_create_fn",
    "hsa_amd_ipc_signal_create_fn",
    "hsa_amd_ipc_signal_attach_fn",
    "hsa_amd_register_system_event_handler_fn",
    "hsa_amd_queue_intercept_create_fn",
    "hsa_amd_queue_intercept_register_fn",
    "hsa_amd_queue_set_priority_fn",
    "hsa_amd_memory_async_copy_rect_fn",
    "hsa_amd_runtime_queue_create_register_fn",
    "hsa_amd_memory_lock_to_pool_fn",
    "hsa_amd_register_deallocation_callback_fn",
    "hsa_amd_deregister_deallocation_callback_fn",
    "hsa_amd_signal_value_pointer_fn",
    "hsa_amd_svm_attributes_set_fn",
    "hsa_amd_svm_attributes_get_fn",
    "hsa_amd_svm_prefetch_async_fn",
    "hsa_amd_queue_cu_get_mask_fn",
];

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

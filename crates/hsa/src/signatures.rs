//! The C signatures of the HSA API-table entries ditto calls or wraps
//! (`hsa.h`, `hsa_ext_amd.h`, ROCm 5.2), and of the callbacks they take.
//! Owns signatures only: where each entry sits in a table is `table`'s.
#![allow(non_camel_case_types)]

use crate::types::*;
use std::ffi::{c_char, c_int, c_void};

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

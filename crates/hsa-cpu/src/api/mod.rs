//! The API entry points. Owns the ONE declaration list of implemented
//! functions below, the served tables filled from it, and the constructor
//! that resolves every slot. From that list come:
//! - `entries::<name>`: our implementation, run under `entry_guard` (a panic
//!   becomes HSA_STATUS_ERROR, or 0 for value-returning functions);
//! - the table entries pointing at them, placed BY NAME in the tables of the
//!   served ABI (`api_tables`, `served_abi`); every other entry holds a stub that
//!   returns HSA_STATUS_ERROR (HSA_STATUS_ERROR_INVALID_ARGUMENT in the
//!   image table: our agents have no images): never null;
//! - for `export` lines, the exported `hsa_*` symbol (version ROCR_1), a
//!   trampoline that calls THROUGH the served table (`slots`), so a tool's
//!   wrap sees every caller. `table_only` lines (the intercept-queue
//!   functions) are reachable only through the table, as in ROCr.
//!
//! The functions we do not implement are exported too
//! (`unimplemented_exports`). Never holds state of its own beyond the tables
//! and the slots.
//!
//! An entry's body is safe code but for the calls that rely on the entry's
//! own contract (its arguments as hsa.h / hsa_ext_amd.h require them): those
//! are `unsafe` blocks, each with its SAFETY line.
//!
//! - `entry_guard`           no panic crosses the C boundary
//! - `slots`                 stub entries, slots and their resolution, the
//!   call through a slot
//! - `unimplemented_exports` the exported trampolines of every other function

#[macro_use]
mod slots;
mod entry_guard;
mod unimplemented_exports;

use crate::api::entry_guard::{FailValue, guard};
use crate::api::slots::{NO_IMAGES_WORD, STUB_WORD, index_of, resolve, unresolved};
use crate::api::unimplemented_exports::{JUMP_SLOTS, JUMPS};
use crate::code_objects::{executables, loader_extension};
use crate::memory::{allocations, copy_engines, ipc, virtual_memory};
use crate::signals_and_queues::signals::{Order, Rmw};
use crate::signals_and_queues::{async_events, intercept_queues, profiling, queues, signals};
use crate::tools::api_tables::{Implementation, ServedTables};
use crate::tools::served_abi;
use crate::{agent_info, agents, runtime, system_events};
use hsa::versions::Table;
use hsa::*;
use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

static SERVED: OnceLock<ServedTables> = OnceLock::new();

/// The served tables, made and filled on first use.
fn served() -> &'static ServedTables {
    SERVED.get_or_init(|| {
        // The stubs' addresses as their words hold them (one address each:
        // a tiny function may have a copy in every codegen unit using it).
        let stub = STUB_WORD as *const () as usize;
        let no_images = NO_IMAGES_WORD as *const () as usize;
        let tables = ServedTables::new(served_abi::layout_abi(), stub, no_images)
            // The measured data holds every release `served_abi` names: a test
            // (api_tables.rs) pins each; this is unreachable.
            .unwrap_or_else(|e| panic!("hsa-cpu: cannot lay out the API tables: {e}"));
        tables.fill(&implementations());
        tables
    })
}

/// The root table handed to tools.
pub fn root_table() -> *mut HsaApiTable {
    served().root()
}

/// The served tables (tests, diagnostics).
pub fn served_tables() -> &'static ServedTables {
    served()
}

/// Puts our own entries back in every slot (after tools are unloaded).
pub fn restore_tables() {
    served().fill(&implementations());
}

/// `hsa_init`: refused when DITTO_HSA_CPU_ABI names no ABI we serve.
fn init() -> hsa_status_t {
    match served_abi::served() {
        // SAFETY: the root table is the served one, never freed.
        Ok(abi) => unsafe {
            runtime::init(
                root_table(),
                crate::tools::loading::Loading {
                    discover_loaded: abi.discovers_loaded_tools(),
                    keep_without_on_load: abi.keeps_tools_without_on_load(),
                },
            )
        },
        Err(unknown) => {
            eprintln!("hsa-cpu: error: {unknown}");
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        }
    }
}

/// Resolves every slot (the constructor; also harmless to run again).
extern "C" fn publish_slots() {
    resolve(served(), &IMPLEMENTED_SLOTS, IMPLEMENTED);
    resolve(served(), &JUMP_SLOTS, JUMPS);
}

#[used]
#[unsafe(link_section = ".init_array")]
static PUBLISH_SLOTS: extern "C" fn() = publish_slots;

macro_rules! exported {
    (export, $name:ident, ($($arg:ident : $ty:ty),*), $ret:ty) => {
        /// Exported HSA function (ROCR_1): calls through the served table.
        ///
        /// # Safety
        /// C ABI entry: the arguments must satisfy hsa.h / hsa_ext_amd.h.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            const AT: usize = index_of(IMPLEMENTED, stringify!($name));
            through_slot!(IMPLEMENTED_SLOTS[AT], ($($arg : $ty),*), $ret)
        }
        std::arch::global_asm!(concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@@ROCR_1"));
    };
    (table_only, $name:ident, ($($arg:ident : $ty:ty),*), $ret:ty) => {};
}

macro_rules! hsa_api {
    ($( $vis:ident $table:ident . $field:ident : fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty => $body:expr ; )*) => {
        /// Our implementations, as placed in the table.
        pub mod entries {
            #[allow(unused_imports)]
            use super::*;
            $(
                /// Our implementation, as placed in the table.
                ///
                /// # Safety
                /// C ABI entry: the arguments must satisfy hsa.h / hsa_ext_amd.h.
                #[allow(unused_variables, clippy::too_many_arguments)]
                pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                    let result = guard(stringify!($name), move || $body);
                    result.trace_failure(stringify!($name));
                    result
                }
            )*
        }

        /// Every implemented entry: table, entry name, function name.
        const IMPLEMENTED: &[(Table, &str, &str)] = &[
            $( (table_of!($table), stringify!($field), stringify!($name)), )*
        ];

        /// The slot of every implemented entry, in declaration order.
        static IMPLEMENTED_SLOTS: [AtomicPtr<usize>; IMPLEMENTED.len()] =
            [const { unresolved(&STUB_WORD) }; IMPLEMENTED.len()];

        /// Our implementations with their entries, for the served tables.
        fn implementations() -> Vec<Implementation> {
            vec![ $( (table_of!($table), stringify!($field), entries::$name as *const () as usize), )* ]
        }

        $( exported!($vis, $name, ($($arg : $ty),*), $ret); )*
    };
}

type AgentCallback = Option<unsafe extern "C" fn(hsa_agent_t, *mut c_void) -> hsa_status_t>;
type IsaCallback = Option<unsafe extern "C" fn(hsa_isa_t, *mut c_void) -> hsa_status_t>;
type PoolCallback =
    Option<unsafe extern "C" fn(hsa_amd_memory_pool_t, *mut c_void) -> hsa_status_t>;
type SymbolCallback = Option<
    unsafe extern "C" fn(hsa_executable_t, hsa_executable_symbol_t, *mut c_void) -> hsa_status_t,
>;
type AllocCallback = Option<unsafe extern "C" fn(usize) -> *mut c_void>;
type Sig = hsa_signal_t;
type Val = hsa_signal_value_t;
type Q = *const hsa_queue_t;

hsa_api! {
    // --- runtime, system, agents ---
    export core.hsa_init_fn: fn hsa_init() -> hsa_status_t => init();
    export core.hsa_shut_down_fn: fn hsa_shut_down() -> hsa_status_t => runtime::shut_down(restore_tables);
    export core.hsa_system_get_info_fn: fn hsa_system_get_info(attribute: hsa_system_info_t, value: *mut c_void) -> hsa_status_t
        // SAFETY: `value` as hsa.h requires (the entry's contract).
        => unsafe { agent_info::system_get_info(attribute, value) };
    export core.hsa_system_get_major_extension_table_fn: fn hsa_system_get_major_extension_table(extension: u16, version_major: u16, table_length: usize, table: *mut c_void) -> hsa_status_t
        // SAFETY: `table` as hsa.h requires (the entry's contract).
        => unsafe { loader_extension::system_get_major_extension_table(extension, version_major, table_length, table) };
    export core.hsa_status_string_fn: fn hsa_status_string(status: hsa_status_t, status_string: *mut *const c_char) -> hsa_status_t
        // SAFETY: `status_string` as hsa.h requires (the entry's contract).
        => unsafe { agent_info::status_string(status, status_string) };
    export core.hsa_iterate_agents_fn: fn hsa_iterate_agents(callback: AgentCallback, data: *mut c_void) -> hsa_status_t
        // SAFETY: `callback`, `data` as hsa.h requires (the entry's contract).
        => unsafe { agent_info::iterate_agents(callback, data) };
    export core.hsa_agent_get_info_fn: fn hsa_agent_get_info(agent: hsa_agent_t, attribute: hsa_agent_info_t, value: *mut c_void) -> hsa_status_t
        // SAFETY: `value` as hsa.h requires (the entry's contract).
        => unsafe { agent_info::agent_get_info(agent, attribute, value) };
    export core.hsa_agent_iterate_isas_fn: fn hsa_agent_iterate_isas(agent: hsa_agent_t, callback: IsaCallback, data: *mut c_void) -> hsa_status_t
        // SAFETY: `callback`, `data` as hsa.h requires (the entry's contract).
        => unsafe { agent_info::agent_iterate_isas(agent, callback, data) };
    export core.hsa_isa_get_info_alt_fn: fn hsa_isa_get_info_alt(isa: hsa_isa_t, attribute: hsa_isa_info_t, value: *mut c_void) -> hsa_status_t
        // SAFETY: `value` as hsa.h requires (the entry's contract).
        => unsafe { agent_info::isa_get_info_alt(isa, attribute, value) };
    export amd.hsa_amd_agent_iterate_memory_pools_fn: fn hsa_amd_agent_iterate_memory_pools(agent: hsa_agent_t, callback: PoolCallback, data: *mut c_void) -> hsa_status_t
        // SAFETY: `callback`, `data` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { agent_info::iterate_memory_pools(agent, callback, data) };
    export amd.hsa_amd_memory_pool_get_info_fn: fn hsa_amd_memory_pool_get_info(pool: hsa_amd_memory_pool_t, attribute: hsa_amd_memory_pool_info_t, value: *mut c_void) -> hsa_status_t
        // SAFETY: `value` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { agent_info::memory_pool_get_info(pool, attribute, value) };
    export amd.hsa_amd_agent_memory_pool_get_info_fn: fn hsa_amd_agent_memory_pool_get_info(agent: hsa_agent_t, pool: hsa_amd_memory_pool_t, attribute: hsa_amd_agent_memory_pool_info_t, value: *mut c_void) -> hsa_status_t
        // SAFETY: `value` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { agent_info::agent_memory_pool_get_info(agent, pool, attribute, value) };

    // --- memory ---
    export amd.hsa_amd_memory_pool_allocate_fn: fn hsa_amd_memory_pool_allocate(pool: hsa_amd_memory_pool_t, size: usize, flags: u32, ptr: *mut *mut c_void) -> hsa_status_t
        // SAFETY: `ptr` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { allocations::pool_allocate(pool, size, flags, ptr) };
    export amd.hsa_amd_memory_pool_free_fn: fn hsa_amd_memory_pool_free(ptr: *mut c_void) -> hsa_status_t => allocations::pool_free(ptr);
    export core.hsa_memory_free_fn: fn hsa_memory_free(ptr: *mut c_void) -> hsa_status_t => allocations::pool_free(ptr);
    export core.hsa_memory_copy_fn: fn hsa_memory_copy(dst: *mut c_void, src: *const c_void, size: usize) -> hsa_status_t
        // SAFETY: `dst`, `src` as hsa.h requires (the entry's contract).
        => unsafe { allocations::memory_copy(dst, src, size) };
    export amd.hsa_amd_memory_async_copy_fn: fn hsa_amd_memory_async_copy(dst: *mut c_void, dst_agent: hsa_agent_t, src: *const c_void, src_agent: hsa_agent_t, size: usize, num_dep_signals: u32, dep_signals: *const hsa_signal_t, completion_signal: hsa_signal_t) -> hsa_status_t
        // SAFETY: `dst`, `src`, `dep_signals` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { copy_engines::async_copy(dst, dst_agent, src, src_agent, size, num_dep_signals, dep_signals, completion_signal) };
    export amd.hsa_amd_memory_async_copy_on_engine_fn: fn hsa_amd_memory_async_copy_on_engine(dst: *mut c_void, dst_agent: hsa_agent_t, src: *const c_void, src_agent: hsa_agent_t, size: usize, num_dep_signals: u32, dep_signals: *const hsa_signal_t, completion_signal: hsa_signal_t, engine_id: u32, force_copy_on_sdma: bool) -> hsa_status_t
        => if agents::is_sdma_engine(engine_id) {
            // SAFETY: `dst`, `src`, `dep_signals` as hsa_ext_amd.h requires (the entry's contract).
            unsafe { copy_engines::async_copy(dst, dst_agent, src, src_agent, size, num_dep_signals, dep_signals, completion_signal) }
        } else {
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        };
    export amd.hsa_amd_memory_copy_engine_status_fn: fn hsa_amd_memory_copy_engine_status(dst_agent: hsa_agent_t, src_agent: hsa_agent_t, engine_ids_mask: *mut u32) -> hsa_status_t
        // SAFETY: `engine_ids_mask` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { agent_info::copy_engine_status(dst_agent, src_agent, engine_ids_mask) };
    export amd.hsa_amd_agent_set_async_scratch_limit_fn: fn hsa_amd_agent_set_async_scratch_limit(agent: hsa_agent_t, threshold: usize) -> hsa_status_t
        => agent_info::set_async_scratch_limit(agent, threshold);
    export amd.hsa_amd_memory_get_preferred_copy_engine_fn: fn hsa_amd_memory_get_preferred_copy_engine(dst_agent: hsa_agent_t, src_agent: hsa_agent_t, recommended_ids_mask: *mut u32) -> hsa_status_t
        // SAFETY: `recommended_ids_mask` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { agent_info::preferred_copy_engine(dst_agent, src_agent, recommended_ids_mask) };
    export amd.hsa_amd_enable_logging_fn: fn hsa_amd_enable_logging(flags: *mut u8, file: *mut c_void) -> hsa_status_t
        => HSA_STATUS_SUCCESS;
    export amd.hsa_amd_agents_allow_access_fn: fn hsa_amd_agents_allow_access(num_agents: u32, agents: *const hsa_agent_t, flags: *const u32, ptr: *const c_void) -> hsa_status_t
        // SAFETY: `agents`, `flags`, `ptr` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { allocations::agents_allow_access(num_agents, agents, flags, ptr) };
    export amd.hsa_amd_memory_lock_fn: fn hsa_amd_memory_lock(host_ptr: *mut c_void, size: usize, agents: *mut hsa_agent_t, num_agent: c_int, agent_ptr: *mut *mut c_void) -> hsa_status_t
        // SAFETY: `host_ptr`, `agents`, `agent_ptr` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { allocations::memory_lock(host_ptr, size, agents, num_agent, agent_ptr) };
    export amd.hsa_amd_memory_lock_to_pool_fn: fn hsa_amd_memory_lock_to_pool(host_ptr: *mut c_void, size: usize, agents: *mut hsa_agent_t, num_agent: c_int, pool: hsa_amd_memory_pool_t, flags: u32, agent_ptr: *mut *mut c_void) -> hsa_status_t
        // SAFETY: `host_ptr`, `agents`, `agent_ptr` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { allocations::memory_lock_to_pool(host_ptr, size, agents, num_agent, pool, flags, agent_ptr) };
    export amd.hsa_amd_memory_unlock_fn: fn hsa_amd_memory_unlock(host_ptr: *mut c_void) -> hsa_status_t => allocations::memory_unlock(host_ptr);
    // --- virtual memory (interface 1.6 on; tables of 6.0 and later) ---
    export amd.hsa_amd_vmem_address_reserve_fn: fn hsa_amd_vmem_address_reserve(va: *mut *mut c_void, size: usize, address: u64, flags: u64) -> hsa_status_t
        // SAFETY: `va` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { virtual_memory::address_reserve_align(va, size, address, 0, flags) };
    export amd.hsa_amd_vmem_address_reserve_align_fn: fn hsa_amd_vmem_address_reserve_align(va: *mut *mut c_void, size: usize, address: u64, alignment: u64, flags: u64) -> hsa_status_t
        // SAFETY: `va` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { virtual_memory::address_reserve_align(va, size, address, alignment, flags) };
    export amd.hsa_amd_vmem_address_free_fn: fn hsa_amd_vmem_address_free(va: *mut c_void, size: usize) -> hsa_status_t
        => virtual_memory::address_free(va, size);
    export amd.hsa_amd_vmem_handle_create_fn: fn hsa_amd_vmem_handle_create(pool: hsa_amd_memory_pool_t, size: usize, memory_type: hsa_amd_memory_type_t, flags: u64, memory_handle: *mut hsa_amd_vmem_alloc_handle_t) -> hsa_status_t
        // SAFETY: `memory_handle` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { virtual_memory::handle_create(pool, size, memory_type, flags, memory_handle) };
    export amd.hsa_amd_vmem_handle_release_fn: fn hsa_amd_vmem_handle_release(memory_handle: hsa_amd_vmem_alloc_handle_t) -> hsa_status_t
        => virtual_memory::handle_release(memory_handle);
    export amd.hsa_amd_vmem_map_fn: fn hsa_amd_vmem_map(va: *mut c_void, size: usize, in_offset: usize, memory_handle: hsa_amd_vmem_alloc_handle_t, flags: u64) -> hsa_status_t
        => virtual_memory::map(va, size, in_offset, memory_handle, flags);
    export amd.hsa_amd_vmem_unmap_fn: fn hsa_amd_vmem_unmap(va: *mut c_void, size: usize) -> hsa_status_t
        => virtual_memory::unmap(va, size);
    export amd.hsa_amd_vmem_set_access_fn: fn hsa_amd_vmem_set_access(va: *mut c_void, size: usize, desc: *const hsa_amd_memory_access_desc_t, desc_cnt: usize) -> hsa_status_t
        // SAFETY: `va`, `desc` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { virtual_memory::set_access(va, size, desc, desc_cnt) };
    export amd.hsa_amd_vmem_get_access_fn: fn hsa_amd_vmem_get_access(va: *mut c_void, perms: *mut hsa_access_permission_t, agent_handle: hsa_agent_t) -> hsa_status_t
        // SAFETY: `va`, `perms` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { virtual_memory::get_access(va, perms, agent_handle) };
    export amd.hsa_amd_vmem_export_shareable_handle_fn: fn hsa_amd_vmem_export_shareable_handle(dmabuf_fd: *mut c_int, handle: hsa_amd_vmem_alloc_handle_t, flags: u64) -> hsa_status_t
        // SAFETY: `dmabuf_fd` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { virtual_memory::export_shareable_handle(dmabuf_fd, handle, flags) };
    export amd.hsa_amd_vmem_import_shareable_handle_fn: fn hsa_amd_vmem_import_shareable_handle(dmabuf_fd: c_int, handle: *mut hsa_amd_vmem_alloc_handle_t) -> hsa_status_t
        // SAFETY: `handle` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { virtual_memory::import_shareable_handle(dmabuf_fd, handle) };
    export amd.hsa_amd_vmem_retain_alloc_handle_fn: fn hsa_amd_vmem_retain_alloc_handle(memory_handle: *mut hsa_amd_vmem_alloc_handle_t, addr: *mut c_void) -> hsa_status_t
        // SAFETY: `memory_handle`, `addr` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { virtual_memory::retain_alloc_handle(memory_handle, addr) };
    export amd.hsa_amd_vmem_get_alloc_properties_from_handle_fn: fn hsa_amd_vmem_get_alloc_properties_from_handle(memory_handle: hsa_amd_vmem_alloc_handle_t, pool: *mut hsa_amd_memory_pool_t, memory_type: *mut hsa_amd_memory_type_t) -> hsa_status_t
        // SAFETY: `pool`, `memory_type` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { virtual_memory::alloc_properties(memory_handle, pool, memory_type) };
    export amd.hsa_amd_pointer_info_fn: fn hsa_amd_pointer_info(ptr: *const c_void, info: *mut hsa_amd_pointer_info_t, alloc: AllocCallback, num_agents_accessible: *mut u32, accessible: *mut *mut hsa_agent_t) -> hsa_status_t
        // SAFETY: `info`, `alloc`, `num_agents_accessible`, `accessible` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { allocations::pointer_info(ptr, info, alloc, num_agents_accessible, accessible, |p| {
            ipc::attachment_described(p).or_else(|| virtual_memory::described(p))
        }) };

    // --- IPC ---
    export amd.hsa_amd_ipc_memory_create_fn: fn hsa_amd_ipc_memory_create(ptr: *mut c_void, len: usize, handle: *mut hsa_amd_ipc_memory_t) -> hsa_status_t
        // SAFETY: `ptr`, `handle` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { ipc::memory_create(ptr, len, handle) };
    export amd.hsa_amd_ipc_memory_attach_fn: fn hsa_amd_ipc_memory_attach(handle: *const hsa_amd_ipc_memory_t, len: usize, num_agents: u32, mapping_agents: *const hsa_agent_t, mapped_ptr: *mut *mut c_void) -> hsa_status_t
        // SAFETY: `handle`, `mapping_agents`, `mapped_ptr` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { ipc::memory_attach(handle, len, num_agents, mapping_agents, mapped_ptr) };
    export amd.hsa_amd_ipc_memory_detach_fn: fn hsa_amd_ipc_memory_detach(mapped_ptr: *mut c_void) -> hsa_status_t => ipc::memory_detach(mapped_ptr);

    // --- signals ---
    export core.hsa_signal_create_fn: fn hsa_signal_create(initial_value: Val, num_consumers: u32, consumers: *const hsa_agent_t, signal: *mut hsa_signal_t) -> hsa_status_t
        // SAFETY: `consumers`, `signal` as hsa.h requires (the entry's contract).
        => unsafe { signals::signal_create(initial_value, num_consumers, consumers, signal) };
    export amd.hsa_amd_signal_create_fn: fn hsa_amd_signal_create(initial_value: Val, num_consumers: u32, consumers: *const hsa_agent_t, attributes: u64, signal: *mut hsa_signal_t) -> hsa_status_t
        // SAFETY: `consumers`, `signal` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { signals::amd_signal_create(initial_value, num_consumers, consumers, attributes, signal) };
    export core.hsa_signal_destroy_fn: fn hsa_signal_destroy(signal: Sig) -> hsa_status_t => signals::destroy(signal);
    export core.hsa_signal_load_relaxed_fn: fn hsa_signal_load_relaxed(signal: Sig) -> Val => signals::load(signal, Order::Relaxed);
    export core.hsa_signal_load_scacquire_fn: fn hsa_signal_load_scacquire(signal: Sig) -> Val => signals::load(signal, Order::Acquire);
    export core.hsa_signal_store_relaxed_fn: fn hsa_signal_store_relaxed(signal: Sig, value: Val) -> () => signals::store(signal, value, Order::Relaxed);
    export core.hsa_signal_store_screlease_fn: fn hsa_signal_store_screlease(signal: Sig, value: Val) -> () => signals::store(signal, value, Order::Release);
    export core.hsa_signal_silent_store_relaxed_fn: fn hsa_signal_silent_store_relaxed(signal: Sig, value: Val) -> () => signals::silent_store(signal, value, Order::Relaxed);
    export core.hsa_signal_silent_store_screlease_fn: fn hsa_signal_silent_store_screlease(signal: Sig, value: Val) -> () => signals::silent_store(signal, value, Order::Release);
    export core.hsa_signal_wait_relaxed_fn: fn hsa_signal_wait_relaxed(signal: Sig, condition: hsa_signal_condition_t, compare_value: Val, timeout_hint: u64, wait_state_hint: hsa_wait_state_t) -> Val
        => { crate::tools::trace::event("signal-wait"); signals::wait(signal, condition, compare_value, timeout_hint, Order::Relaxed) };
    export core.hsa_signal_wait_scacquire_fn: fn hsa_signal_wait_scacquire(signal: Sig, condition: hsa_signal_condition_t, compare_value: Val, timeout_hint: u64, wait_state_hint: hsa_wait_state_t) -> Val
        => { crate::tools::trace::event("signal-wait"); signals::wait(signal, condition, compare_value, timeout_hint, Order::Acquire) };
    export core.hsa_signal_and_relaxed_fn: fn hsa_signal_and_relaxed(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::And, value, Order::Relaxed); };
    export core.hsa_signal_and_scacquire_fn: fn hsa_signal_and_scacquire(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::And, value, Order::Acquire); };
    export core.hsa_signal_and_screlease_fn: fn hsa_signal_and_screlease(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::And, value, Order::Release); };
    export core.hsa_signal_and_scacq_screl_fn: fn hsa_signal_and_scacq_screl(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::And, value, Order::AcqRel); };
    export core.hsa_signal_or_relaxed_fn: fn hsa_signal_or_relaxed(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Or, value, Order::Relaxed); };
    export core.hsa_signal_or_scacquire_fn: fn hsa_signal_or_scacquire(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Or, value, Order::Acquire); };
    export core.hsa_signal_or_screlease_fn: fn hsa_signal_or_screlease(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Or, value, Order::Release); };
    export core.hsa_signal_or_scacq_screl_fn: fn hsa_signal_or_scacq_screl(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Or, value, Order::AcqRel); };
    export core.hsa_signal_xor_relaxed_fn: fn hsa_signal_xor_relaxed(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Xor, value, Order::Relaxed); };
    export core.hsa_signal_xor_scacquire_fn: fn hsa_signal_xor_scacquire(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Xor, value, Order::Acquire); };
    export core.hsa_signal_xor_screlease_fn: fn hsa_signal_xor_screlease(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Xor, value, Order::Release); };
    export core.hsa_signal_xor_scacq_screl_fn: fn hsa_signal_xor_scacq_screl(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Xor, value, Order::AcqRel); };
    export core.hsa_signal_add_relaxed_fn: fn hsa_signal_add_relaxed(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Add, value, Order::Relaxed); };
    export core.hsa_signal_add_scacquire_fn: fn hsa_signal_add_scacquire(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Add, value, Order::Acquire); };
    export core.hsa_signal_add_screlease_fn: fn hsa_signal_add_screlease(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Add, value, Order::Release); };
    export core.hsa_signal_add_scacq_screl_fn: fn hsa_signal_add_scacq_screl(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Add, value, Order::AcqRel); };
    export core.hsa_signal_subtract_relaxed_fn: fn hsa_signal_subtract_relaxed(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Subtract, value, Order::Relaxed); };
    export core.hsa_signal_subtract_scacquire_fn: fn hsa_signal_subtract_scacquire(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Subtract, value, Order::Acquire); };
    export core.hsa_signal_subtract_screlease_fn: fn hsa_signal_subtract_screlease(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Subtract, value, Order::Release); };
    export core.hsa_signal_subtract_scacq_screl_fn: fn hsa_signal_subtract_scacq_screl(signal: Sig, value: Val) -> () => { signals::rmw(signal, Rmw::Subtract, value, Order::AcqRel); };
    export core.hsa_signal_exchange_relaxed_fn: fn hsa_signal_exchange_relaxed(signal: Sig, value: Val) -> Val => signals::rmw(signal, Rmw::Exchange, value, Order::Relaxed);
    export core.hsa_signal_exchange_scacquire_fn: fn hsa_signal_exchange_scacquire(signal: Sig, value: Val) -> Val => signals::rmw(signal, Rmw::Exchange, value, Order::Acquire);
    export core.hsa_signal_exchange_screlease_fn: fn hsa_signal_exchange_screlease(signal: Sig, value: Val) -> Val => signals::rmw(signal, Rmw::Exchange, value, Order::Release);
    export core.hsa_signal_exchange_scacq_screl_fn: fn hsa_signal_exchange_scacq_screl(signal: Sig, value: Val) -> Val => signals::rmw(signal, Rmw::Exchange, value, Order::AcqRel);
    export core.hsa_signal_cas_relaxed_fn: fn hsa_signal_cas_relaxed(signal: Sig, expected: Val, value: Val) -> Val => signals::cas(signal, expected, value, Order::Relaxed);
    export core.hsa_signal_cas_scacquire_fn: fn hsa_signal_cas_scacquire(signal: Sig, expected: Val, value: Val) -> Val => signals::cas(signal, expected, value, Order::Acquire);
    export core.hsa_signal_cas_screlease_fn: fn hsa_signal_cas_screlease(signal: Sig, expected: Val, value: Val) -> Val => signals::cas(signal, expected, value, Order::Release);
    export core.hsa_signal_cas_scacq_screl_fn: fn hsa_signal_cas_scacq_screl(signal: Sig, expected: Val, value: Val) -> Val => signals::cas(signal, expected, value, Order::AcqRel);
    export amd.hsa_amd_signal_wait_any_fn: fn hsa_amd_signal_wait_any(signal_count: u32, signals: *mut hsa_signal_t, conds: *mut hsa_signal_condition_t, values: *mut Val, timeout_hint: u64, wait_hint: hsa_wait_state_t, satisfying_value: *mut Val) -> u32
        // SAFETY: `signals`, `conds`, `values`, `satisfying_value` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { signals::amd_wait_any(signal_count, signals, conds, values, timeout_hint, wait_hint, satisfying_value) };
    export amd.hsa_amd_signal_async_handler_fn: fn hsa_amd_signal_async_handler(signal: Sig, cond: hsa_signal_condition_t, value: Val, handler: SignalHandler, arg: *mut c_void) -> hsa_status_t
        // SAFETY: `handler`, `arg` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { async_events::async_handler(signal, cond, value, handler, arg) };
    export amd.hsa_amd_register_system_event_handler_fn: fn hsa_amd_register_system_event_handler(callback: hsa_amd_system_event_callback_t, data: *mut c_void) -> hsa_status_t
        // SAFETY: `callback`, `data` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { system_events::register_handler(callback, data) };
    export amd.hsa_amd_profiling_get_dispatch_time_fn: fn hsa_amd_profiling_get_dispatch_time(agent: hsa_agent_t, signal: Sig, time: *mut hsa_amd_profiling_dispatch_time_t) -> hsa_status_t
        // SAFETY: `time` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { profiling::get_dispatch_time(agent, signal, time) };

    // --- queues ---
    export core.hsa_queue_create_fn: fn hsa_queue_create(agent: hsa_agent_t, size: u32, type_: hsa_queue_type32_t, callback: QueueErrorCallback, data: *mut c_void, private_segment_size: u32, group_segment_size: u32, queue: *mut *mut hsa_queue_t) -> hsa_status_t
        // SAFETY: `callback`, `data`, `queue` as hsa.h requires (the entry's contract).
        => unsafe { queues::queue_create(agent, size, type_, callback, data, private_segment_size, group_segment_size, queue) };
    export amd.hsa_amd_queue_create_fn: fn hsa_amd_queue_create(agent: hsa_agent_t, descs: *mut hsa_amd_queue_create_desc_t, num_descs: u32) -> hsa_status_t
        // SAFETY: `descs` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { queues::amd_queue_create(agent, descs, num_descs) };
    export core.hsa_queue_destroy_fn: fn hsa_queue_destroy(queue: *mut hsa_queue_t) -> hsa_status_t => queues::queue_destroy(queue);
    export core.hsa_queue_load_read_index_scacquire_fn: fn hsa_queue_load_read_index_scacquire(queue: Q) -> u64 => queues::load_read_index(queue, Ordering::Acquire);
    export core.hsa_queue_load_read_index_relaxed_fn: fn hsa_queue_load_read_index_relaxed(queue: Q) -> u64 => queues::load_read_index(queue, Ordering::Relaxed);
    export core.hsa_queue_load_write_index_scacquire_fn: fn hsa_queue_load_write_index_scacquire(queue: Q) -> u64 => queues::load_write_index(queue, Ordering::Acquire);
    export core.hsa_queue_load_write_index_relaxed_fn: fn hsa_queue_load_write_index_relaxed(queue: Q) -> u64 => queues::load_write_index(queue, Ordering::Relaxed);
    export core.hsa_queue_store_write_index_relaxed_fn: fn hsa_queue_store_write_index_relaxed(queue: Q, value: u64) -> () => queues::store_write_index(queue, value, Ordering::Relaxed);
    export core.hsa_queue_store_write_index_screlease_fn: fn hsa_queue_store_write_index_screlease(queue: Q, value: u64) -> () => queues::store_write_index(queue, value, Ordering::Release);
    export core.hsa_queue_store_read_index_relaxed_fn: fn hsa_queue_store_read_index_relaxed(queue: Q, value: u64) -> () => queues::store_read_index(queue, value, Ordering::Relaxed);
    export core.hsa_queue_store_read_index_screlease_fn: fn hsa_queue_store_read_index_screlease(queue: Q, value: u64) -> () => queues::store_read_index(queue, value, Ordering::Release);
    export core.hsa_queue_cas_write_index_scacq_screl_fn: fn hsa_queue_cas_write_index_scacq_screl(queue: Q, expected: u64, value: u64) -> u64 => queues::cas_write_index(queue, expected, value, Ordering::AcqRel);
    export core.hsa_queue_cas_write_index_scacquire_fn: fn hsa_queue_cas_write_index_scacquire(queue: Q, expected: u64, value: u64) -> u64 => queues::cas_write_index(queue, expected, value, Ordering::Acquire);
    export core.hsa_queue_cas_write_index_relaxed_fn: fn hsa_queue_cas_write_index_relaxed(queue: Q, expected: u64, value: u64) -> u64 => queues::cas_write_index(queue, expected, value, Ordering::Relaxed);
    export core.hsa_queue_cas_write_index_screlease_fn: fn hsa_queue_cas_write_index_screlease(queue: Q, expected: u64, value: u64) -> u64 => queues::cas_write_index(queue, expected, value, Ordering::Release);
    export core.hsa_queue_add_write_index_scacq_screl_fn: fn hsa_queue_add_write_index_scacq_screl(queue: Q, value: u64) -> u64 => queues::add_write_index(queue, value, Ordering::AcqRel);
    export core.hsa_queue_add_write_index_scacquire_fn: fn hsa_queue_add_write_index_scacquire(queue: Q, value: u64) -> u64 => queues::add_write_index(queue, value, Ordering::Acquire);
    export core.hsa_queue_add_write_index_relaxed_fn: fn hsa_queue_add_write_index_relaxed(queue: Q, value: u64) -> u64 => queues::add_write_index(queue, value, Ordering::Relaxed);
    export core.hsa_queue_add_write_index_screlease_fn: fn hsa_queue_add_write_index_screlease(queue: Q, value: u64) -> u64 => queues::add_write_index(queue, value, Ordering::Release);
    export amd.hsa_amd_profiling_set_profiler_enabled_fn: fn hsa_amd_profiling_set_profiler_enabled(queue: *mut hsa_queue_t, enable: c_int) -> hsa_status_t
        => profiling::set_profiler_enabled(queue, enable);
    table_only amd.hsa_amd_queue_intercept_create_fn: fn hsa_amd_queue_intercept_create(agent: hsa_agent_t, size: u32, type_: hsa_queue_type32_t, callback: QueueErrorCallback, data: *mut c_void, private_segment_size: u32, group_segment_size: u32, queue: *mut *mut hsa_queue_t) -> hsa_status_t
        // SAFETY: `callback`, `data`, `queue` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { intercept_queues::create(agent, size, type_, callback, data, private_segment_size, group_segment_size, queue) };
    table_only amd.hsa_amd_queue_intercept_register_fn: fn hsa_amd_queue_intercept_register(queue: *mut hsa_queue_t, callback: InterceptHandler, user_data: *mut c_void) -> hsa_status_t
        // SAFETY: `queue`, `callback`, `user_data` as hsa_ext_amd.h requires (the entry's contract).
        => unsafe { intercept_queues::register(queue, callback, user_data) };

    // --- code objects and executables ---
    export core.hsa_code_object_reader_create_from_memory_fn: fn hsa_code_object_reader_create_from_memory(code_object: *const c_void, size: usize, code_object_reader: *mut hsa_code_object_reader_t) -> hsa_status_t
        // SAFETY: `code_object`, `code_object_reader` as hsa.h requires (the entry's contract).
        => unsafe { loader_extension::reader_create_from_memory(code_object, size, code_object_reader) };
    export core.hsa_code_object_reader_destroy_fn: fn hsa_code_object_reader_destroy(code_object_reader: hsa_code_object_reader_t) -> hsa_status_t
        => loader_extension::reader_destroy(code_object_reader);
    export core.hsa_executable_create_alt_fn: fn hsa_executable_create_alt(profile: hsa_profile_t, default_float_rounding_mode: hsa_default_float_rounding_mode_t, options: *const c_char, executable: *mut hsa_executable_t) -> hsa_status_t
        // SAFETY: `options`, `executable` as hsa.h requires (the entry's contract).
        => unsafe { loader_extension::executable_create_alt(profile, default_float_rounding_mode, options, executable) };
    export core.hsa_executable_load_agent_code_object_fn: fn hsa_executable_load_agent_code_object(executable: hsa_executable_t, agent: hsa_agent_t, code_object_reader: hsa_code_object_reader_t, options: *const c_char, loaded_code_object: *mut hsa_loaded_code_object_t) -> hsa_status_t
        // SAFETY: `options`, `loaded_code_object` as hsa.h requires (the entry's contract).
        => unsafe { loader_extension::load_agent_code_object(executable, agent, code_object_reader, options, loaded_code_object) };
    export core.hsa_executable_freeze_fn: fn hsa_executable_freeze(executable: hsa_executable_t, options: *const c_char) -> hsa_status_t
        => executables::executable_freeze(executable, options);
    export core.hsa_executable_destroy_fn: fn hsa_executable_destroy(executable: hsa_executable_t) -> hsa_status_t
        => loader_extension::executable_destroy(executable);
    export core.hsa_executable_get_symbol_by_name_fn: fn hsa_executable_get_symbol_by_name(executable: hsa_executable_t, symbol_name: *const c_char, agent: *const hsa_agent_t, symbol: *mut hsa_executable_symbol_t) -> hsa_status_t
        // SAFETY: `symbol_name`, `agent`, `symbol` as hsa.h requires (the entry's contract).
        => unsafe { executables::get_symbol_by_name(executable, symbol_name, agent, symbol) };
    export core.hsa_executable_iterate_symbols_fn: fn hsa_executable_iterate_symbols(executable: hsa_executable_t, callback: SymbolCallback, data: *mut c_void) -> hsa_status_t
        // SAFETY: `callback`, `data` as hsa.h requires (the entry's contract).
        => unsafe { executables::iterate_symbols(executable, callback, data) };
    export core.hsa_executable_symbol_get_info_fn: fn hsa_executable_symbol_get_info(executable_symbol: hsa_executable_symbol_t, attribute: hsa_executable_symbol_info_t, value: *mut c_void) -> hsa_status_t
        // SAFETY: `value` as hsa.h requires (the entry's contract).
        => unsafe { executables::symbol_get_info(executable_symbol, attribute, value) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(table: Table, name: &str) -> usize {
        let slot = served().slot(table, name).expect("served");
        // SAFETY: a word of a served table.
        unsafe { slot.read_volatile() }
    }

    #[test]
    fn the_default_tables_are_rocm_7_2s() {
        let t = served();
        assert_eq!(t.abi(), served_abi::Abi::Rocm7_2);
        // SAFETY: the root table is never freed.
        let root = unsafe { (*t.root()).version };
        assert_eq!(root, ApiTableVersion::new(3, 64, 1));
        assert_eq!(t.version(Table::AmdExt), ApiTableVersion::new(2, 624, 8));
        assert_eq!(t.version(Table::Core), ApiTableVersion::new(2, 1016, 0));
    }

    #[test]
    fn implemented_entries_hold_ours_and_the_rest_return_errors() {
        assert_eq!(
            word(Table::AmdExt, "hsa_amd_queue_intercept_create_fn"),
            entries::hsa_amd_queue_intercept_create as *const () as usize
        );
        assert_eq!(
            word(Table::Core, "hsa_soft_queue_create_fn"),
            STUB_WORD as *const () as usize
        );
        assert_eq!(
            word(Table::ImageExt, "hsa_ext_image_create_fn"),
            NO_IMAGES_WORD as *const () as usize
        );
    }

    #[test]
    fn every_slot_is_resolved_to_a_served_entry_or_a_stub_word() {
        publish_slots();
        for (slots, names) in [
            (&IMPLEMENTED_SLOTS[..], IMPLEMENTED),
            (&JUMP_SLOTS[..], JUMPS),
        ] {
            for (slot, (table, field, name)) in slots.iter().zip(names) {
                let at = slot.load(Ordering::Acquire);
                let expected = served().slot(*table, field).unwrap_or(match table {
                    Table::ImageExt => &NO_IMAGES_WORD,
                    _ => &STUB_WORD,
                } as *const _
                    as *mut usize);
                assert_eq!(at, expected, "{name}");
            }
        }
    }
}

//! The API table and the exported trampolines. Owns the live `HsaApiTable`
//! (root, core and AMD tables, allocated once, never moved) and the ONE
//! declaration list of implemented functions below. From that list come:
//! - `entries::<name>`: our implementation, run under catch_unwind (a panic
//!   becomes HSA_STATUS_ERROR, or 0 for value-returning functions);
//! - the table slots pointing at them (every other slot points at a stub that
//!   returns HSA_STATUS_ERROR: never null);
//! - for `export` lines, the exported `hsa_*` symbol (version ROCR_1), a
//!   trampoline that calls THROUGH the live table, so a tool's wrap sees every
//!   caller. `table_only` lines (the intercept-queue functions) are reachable
//!   only through the table, as in ROCr.
//!
//! Never holds state of its own beyond the tables.

use crate::signals::{Order, Rmw};
use crate::{agents, executables, intercept, ipc, loader, memory, queues, runtime, signals};
use hsa::*;
use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::Ordering;

/// What an entry returns when its implementation panicked, and whether a
/// result is a failure worth a trace line (`error <function> <status>`).
pub trait FailValue {
    fn fail() -> Self;
    fn trace_failure(&self, _function: &str) {}
}
impl FailValue for u32 {
    fn fail() -> Self {
        HSA_STATUS_ERROR
    }
    fn trace_failure(&self, function: &str) {
        // INFO_BREAK (0x1) ends an iteration early: not a failure.
        if *self != HSA_STATUS_SUCCESS && *self != HSA_STATUS_INFO_BREAK {
            crate::trace::event(&format!("error {function} {self:#x}"));
        }
    }
}
impl FailValue for i64 {
    fn fail() -> Self {
        0
    }
}
impl FailValue for u64 {
    fn fail() -> Self {
        0
    }
}
impl FailValue for () {
    fn fail() -> Self {}
}

/// Runs an entry; a panic never crosses the C boundary.
fn guard<R: FailValue>(name: &str, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            eprintln!("hsa-cpu: internal error in {name}; returning an error to the caller");
            R::fail()
        }
    }
}

/// Slot value of every table entry we do not implement.
unsafe extern "C" fn unimplemented_entry() -> hsa_status_t {
    HSA_STATUS_ERROR
}

struct Live {
    root: *mut HsaApiTable,
    core: *mut CoreApiTable,
    amd: *mut AmdExtTable,
    finalizer: *mut usize,
    image: *mut usize,
}

/// Sizes of ROCm 5.2.3's FinalizerExtTable and ImageExtTable (the layout
/// served; crates/hsa/data/rocm-abi-tables.json, checked by a test). ROCr
/// always hands tools both; other HSA tools copy them unconditionally.
pub const FINALIZER_EXT_TABLE_BYTES: usize = 64;
pub const IMAGE_EXT_TABLE_BYTES: usize = 120;
/// Their major_id (HSA_FINALIZER/IMAGE_API_TABLE_MAJOR_VERSION of 5.2.3).
const EXT_TABLE_MAJOR_VERSION: u32 = 1;

/// An extension table of `bytes` whose every entry is the stub: we
/// implement no finalizer and no images, as ROCr on an agent without them.
fn stub_extension_table(bytes: usize) -> Vec<usize> {
    let mut words = vec![unimplemented_entry as *const () as usize; bytes / 8];
    words[0] = EXT_TABLE_MAJOR_VERSION as usize | (bytes << 32);
    words[1] = 0;
    words
}
// SAFETY: the tables are leaked, never freed; concurrent slot updates by
// tools are word-sized pointer stores, as in ROCr.
unsafe impl Send for Live {}
// SAFETY: as above.
unsafe impl Sync for Live {}

static LIVE: OnceLock<Live> = OnceLock::new();

fn live() -> &'static Live {
    LIVE.get_or_init(|| {
        let core = Box::into_raw(Box::new(fresh_core()));
        let amd = Box::into_raw(Box::new(fresh_amd()));
        let finalizer =
            Box::leak(stub_extension_table(FINALIZER_EXT_TABLE_BYTES).into_boxed_slice())
                .as_mut_ptr();
        let image =
            Box::leak(stub_extension_table(IMAGE_EXT_TABLE_BYTES).into_boxed_slice()).as_mut_ptr();
        let root = Box::into_raw(Box::new(HsaApiTable {
            version: ApiTableVersion {
                major_id: HSA_API_TABLE_MAJOR_VERSION,
                minor_id: std::mem::size_of::<HsaApiTable>() as u32,
                step_id: HSA_API_TABLE_STEP_VERSION,
                reserved: 0,
            },
            core_: core,
            amd_ext_: amd,
            finalizer_ext_: finalizer as *mut c_void,
            image_ext_: image as *mut c_void,
        }));
        Live {
            root,
            core,
            amd,
            finalizer,
            image,
        }
    })
}

/// The root table handed to tools.
pub fn root_table() -> *mut HsaApiTable {
    live().root
}

/// Puts our own entries back in every slot (after tools are unloaded).
pub fn restore_tables() {
    let l = live();
    // SAFETY: the tables are live for the whole process.
    unsafe {
        *l.core = fresh_core();
        *l.amd = fresh_amd();
        for (table, bytes) in [
            (l.finalizer, FINALIZER_EXT_TABLE_BYTES),
            (l.image, IMAGE_EXT_TABLE_BYTES),
        ] {
            let fresh = stub_extension_table(bytes);
            std::ptr::copy_nonoverlapping(fresh.as_ptr(), table, fresh.len());
        }
    }
}

/// Every function-pointer word after the 16-byte version header gets the stub.
fn stub_slots<T>(table: &mut T) {
    let words = (std::mem::size_of::<T>() - 16) / 8;
    let base = table as *mut T as *mut u8;
    for i in 0..words {
        // SAFETY: the table is 16 bytes of version then `words` pointer slots.
        unsafe {
            (base.add(16 + i * 8) as *mut usize).write(unimplemented_entry as *const () as usize)
        };
    }
}

fn fresh_core() -> CoreApiTable {
    // SAFETY: all-zero is valid for a table of Option<fn> slots and integers.
    let mut t: CoreApiTable = unsafe { std::mem::zeroed() };
    stub_slots(&mut t);
    t.version = ApiTableVersion {
        major_id: HSA_CORE_API_TABLE_MAJOR_VERSION,
        minor_id: std::mem::size_of::<CoreApiTable>() as u32,
        step_id: HSA_API_TABLE_STEP_VERSION,
        reserved: 0,
    };
    fill_core(&mut t);
    t
}

fn fresh_amd() -> AmdExtTable {
    // SAFETY: all-zero is valid for a table of Option<fn> slots and integers.
    let mut t: AmdExtTable = unsafe { std::mem::zeroed() };
    stub_slots(&mut t);
    t.version = ApiTableVersion {
        major_id: HSA_AMD_EXT_API_TABLE_MAJOR_VERSION,
        minor_id: std::mem::size_of::<AmdExtTable>() as u32,
        step_id: HSA_API_TABLE_STEP_VERSION,
        reserved: 0,
    };
    fill_amd(&mut t);
    t
}

macro_rules! exported {
    (export, $table:ident, $field:ident, $name:ident, ($($arg:ident : $ty:ty),*), $ret:ty) => {
        /// Exported HSA function (ROCR_1): calls through the live table.
        ///
        /// # Safety
        /// C ABI entry: the arguments must satisfy hsa.h / hsa_ext_amd.h.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: the live table is never freed; the slot is read as one word.
            let f = unsafe { std::ptr::read_volatile(&raw const (*live().$table).$field) };
            match f {
                // SAFETY: forwarding the caller's arguments to the table entry.
                Some(f) => unsafe { f($($arg),*) },
                None => <$ret as FailValue>::fail(),
            }
        }
        std::arch::global_asm!(concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@@ROCR_1"));
    };
    (table_only, $table:ident, $field:ident, $name:ident, ($($arg:ident : $ty:ty),*), $ret:ty) => {};
}

macro_rules! fill_slot {
    (core, $c:ident, $a:ident, $field:ident, $f:expr) => {
        $c.$field = Some($f as _)
    };
    (amd, $c:ident, $a:ident, $field:ident, $f:expr) => {
        $a.$field = Some($f as _)
    };
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
                #[allow(unused_unsafe, unused_variables, clippy::too_many_arguments)]
                pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                    let result = guard(stringify!($name), move || unsafe { $body });
                    result.trace_failure(stringify!($name));
                    result
                }
            )*
        }

        #[allow(unused_variables)]
        fn fill_both(c: Option<&mut CoreApiTable>, a: Option<&mut AmdExtTable>) {
            let mut scratch_core: CoreApiTable;
            let mut scratch_amd: AmdExtTable;
            let c: &mut CoreApiTable = match c {
                Some(c) => c,
                // SAFETY: all-zero is a valid table; the scratch copy is discarded.
                None => { scratch_core = unsafe { std::mem::zeroed() }; &mut scratch_core }
            };
            let a: &mut AmdExtTable = match a {
                Some(a) => a,
                // SAFETY: as above.
                None => { scratch_amd = unsafe { std::mem::zeroed() }; &mut scratch_amd }
            };
            $( fill_slot!($table, c, a, $field, entries::$name); )*
        }

        $( exported!($vis, $table, $field, $name, ($($arg : $ty),*), $ret); )*
    };
}

fn fill_core(t: &mut CoreApiTable) {
    fill_both(Some(t), None)
}

fn fill_amd(t: &mut AmdExtTable) {
    fill_both(None, Some(t))
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
    export core.hsa_init_fn: fn hsa_init() -> hsa_status_t => runtime::init(root_table());
    export core.hsa_shut_down_fn: fn hsa_shut_down() -> hsa_status_t => runtime::shut_down(restore_tables);
    export core.hsa_system_get_info_fn: fn hsa_system_get_info(attribute: hsa_system_info_t, value: *mut c_void) -> hsa_status_t
        => agents::system_get_info(attribute, value);
    export core.hsa_system_get_major_extension_table_fn: fn hsa_system_get_major_extension_table(extension: u16, version_major: u16, table_length: usize, table: *mut c_void) -> hsa_status_t
        => loader::system_get_major_extension_table(extension, version_major, table_length, table);
    export core.hsa_status_string_fn: fn hsa_status_string(status: hsa_status_t, status_string: *mut *const c_char) -> hsa_status_t
        => agents::status_string(status, status_string);
    export core.hsa_iterate_agents_fn: fn hsa_iterate_agents(callback: AgentCallback, data: *mut c_void) -> hsa_status_t
        => agents::iterate_agents(callback, data);
    export core.hsa_agent_get_info_fn: fn hsa_agent_get_info(agent: hsa_agent_t, attribute: hsa_agent_info_t, value: *mut c_void) -> hsa_status_t
        => agents::agent_get_info(agent, attribute, value);
    export core.hsa_agent_iterate_isas_fn: fn hsa_agent_iterate_isas(agent: hsa_agent_t, callback: IsaCallback, data: *mut c_void) -> hsa_status_t
        => agents::agent_iterate_isas(agent, callback, data);
    export core.hsa_isa_get_info_alt_fn: fn hsa_isa_get_info_alt(isa: hsa_isa_t, attribute: hsa_isa_info_t, value: *mut c_void) -> hsa_status_t
        => agents::isa_get_info_alt(isa, attribute, value);
    export amd.hsa_amd_agent_iterate_memory_pools_fn: fn hsa_amd_agent_iterate_memory_pools(agent: hsa_agent_t, callback: PoolCallback, data: *mut c_void) -> hsa_status_t
        => agents::iterate_memory_pools(agent, callback, data);
    export amd.hsa_amd_memory_pool_get_info_fn: fn hsa_amd_memory_pool_get_info(pool: hsa_amd_memory_pool_t, attribute: hsa_amd_memory_pool_info_t, value: *mut c_void) -> hsa_status_t
        => agents::memory_pool_get_info(pool, attribute, value);
    export amd.hsa_amd_agent_memory_pool_get_info_fn: fn hsa_amd_agent_memory_pool_get_info(agent: hsa_agent_t, pool: hsa_amd_memory_pool_t, attribute: hsa_amd_agent_memory_pool_info_t, value: *mut c_void) -> hsa_status_t
        => agents::agent_memory_pool_get_info(agent, pool, attribute, value);

    // --- memory ---
    export amd.hsa_amd_memory_pool_allocate_fn: fn hsa_amd_memory_pool_allocate(pool: hsa_amd_memory_pool_t, size: usize, flags: u32, ptr: *mut *mut c_void) -> hsa_status_t
        => memory::pool_allocate(pool, size, flags, ptr);
    export amd.hsa_amd_memory_pool_free_fn: fn hsa_amd_memory_pool_free(ptr: *mut c_void) -> hsa_status_t => memory::pool_free(ptr);
    export core.hsa_memory_free_fn: fn hsa_memory_free(ptr: *mut c_void) -> hsa_status_t => memory::pool_free(ptr);
    export core.hsa_memory_copy_fn: fn hsa_memory_copy(dst: *mut c_void, src: *const c_void, size: usize) -> hsa_status_t
        => memory::memory_copy(dst, src, size);
    export amd.hsa_amd_memory_async_copy_fn: fn hsa_amd_memory_async_copy(dst: *mut c_void, dst_agent: hsa_agent_t, src: *const c_void, src_agent: hsa_agent_t, size: usize, num_dep_signals: u32, dep_signals: *const hsa_signal_t, completion_signal: hsa_signal_t) -> hsa_status_t
        => memory::async_copy(dst, dst_agent, src, src_agent, size, num_dep_signals, dep_signals, completion_signal);
    export amd.hsa_amd_agents_allow_access_fn: fn hsa_amd_agents_allow_access(num_agents: u32, agents: *const hsa_agent_t, flags: *const u32, ptr: *const c_void) -> hsa_status_t
        => memory::agents_allow_access(num_agents, agents, flags, ptr);
    export amd.hsa_amd_memory_lock_fn: fn hsa_amd_memory_lock(host_ptr: *mut c_void, size: usize, agents: *mut hsa_agent_t, num_agent: c_int, agent_ptr: *mut *mut c_void) -> hsa_status_t
        => memory::memory_lock(host_ptr, size, agents, num_agent, agent_ptr);
    export amd.hsa_amd_memory_lock_to_pool_fn: fn hsa_amd_memory_lock_to_pool(host_ptr: *mut c_void, size: usize, agents: *mut hsa_agent_t, num_agent: c_int, pool: hsa_amd_memory_pool_t, flags: u32, agent_ptr: *mut *mut c_void) -> hsa_status_t
        => memory::memory_lock_to_pool(host_ptr, size, agents, num_agent, pool, flags, agent_ptr);
    export amd.hsa_amd_memory_unlock_fn: fn hsa_amd_memory_unlock(host_ptr: *mut c_void) -> hsa_status_t => memory::memory_unlock(host_ptr);
    export amd.hsa_amd_pointer_info_fn: fn hsa_amd_pointer_info(ptr: *const c_void, info: *mut hsa_amd_pointer_info_t, alloc: AllocCallback, num_agents_accessible: *mut u32, accessible: *mut *mut hsa_agent_t) -> hsa_status_t
        => memory::pointer_info(ptr, info, alloc, num_agents_accessible, accessible, ipc::attachment_containing);

    // --- IPC ---
    export amd.hsa_amd_ipc_memory_create_fn: fn hsa_amd_ipc_memory_create(ptr: *mut c_void, len: usize, handle: *mut hsa_amd_ipc_memory_t) -> hsa_status_t
        => ipc::memory_create(ptr, len, handle);
    export amd.hsa_amd_ipc_memory_attach_fn: fn hsa_amd_ipc_memory_attach(handle: *const hsa_amd_ipc_memory_t, len: usize, num_agents: u32, mapping_agents: *const hsa_agent_t, mapped_ptr: *mut *mut c_void) -> hsa_status_t
        => ipc::memory_attach(handle, len, num_agents, mapping_agents, mapped_ptr);
    export amd.hsa_amd_ipc_memory_detach_fn: fn hsa_amd_ipc_memory_detach(mapped_ptr: *mut c_void) -> hsa_status_t => ipc::memory_detach(mapped_ptr);

    // --- signals ---
    export core.hsa_signal_create_fn: fn hsa_signal_create(initial_value: Val, num_consumers: u32, consumers: *const hsa_agent_t, signal: *mut hsa_signal_t) -> hsa_status_t
        => signals::signal_create(initial_value, num_consumers, consumers, signal);
    export amd.hsa_amd_signal_create_fn: fn hsa_amd_signal_create(initial_value: Val, num_consumers: u32, consumers: *const hsa_agent_t, attributes: u64, signal: *mut hsa_signal_t) -> hsa_status_t
        => signals::amd_signal_create(initial_value, num_consumers, consumers, attributes, signal);
    export core.hsa_signal_destroy_fn: fn hsa_signal_destroy(signal: Sig) -> hsa_status_t => signals::destroy(signal);
    export core.hsa_signal_load_relaxed_fn: fn hsa_signal_load_relaxed(signal: Sig) -> Val => signals::load(signal, Order::Relaxed);
    export core.hsa_signal_load_scacquire_fn: fn hsa_signal_load_scacquire(signal: Sig) -> Val => signals::load(signal, Order::Acquire);
    export core.hsa_signal_store_relaxed_fn: fn hsa_signal_store_relaxed(signal: Sig, value: Val) -> () => signals::store(signal, value, Order::Relaxed);
    export core.hsa_signal_store_screlease_fn: fn hsa_signal_store_screlease(signal: Sig, value: Val) -> () => signals::store(signal, value, Order::Release);
    export core.hsa_signal_silent_store_relaxed_fn: fn hsa_signal_silent_store_relaxed(signal: Sig, value: Val) -> () => signals::silent_store(signal, value, Order::Relaxed);
    export core.hsa_signal_silent_store_screlease_fn: fn hsa_signal_silent_store_screlease(signal: Sig, value: Val) -> () => signals::silent_store(signal, value, Order::Release);
    export core.hsa_signal_wait_relaxed_fn: fn hsa_signal_wait_relaxed(signal: Sig, condition: hsa_signal_condition_t, compare_value: Val, timeout_hint: u64, wait_state_hint: hsa_wait_state_t) -> Val
        => { crate::trace::event("signal-wait"); signals::wait(signal, condition, compare_value, timeout_hint, Order::Relaxed) };
    export core.hsa_signal_wait_scacquire_fn: fn hsa_signal_wait_scacquire(signal: Sig, condition: hsa_signal_condition_t, compare_value: Val, timeout_hint: u64, wait_state_hint: hsa_wait_state_t) -> Val
        => { crate::trace::event("signal-wait"); signals::wait(signal, condition, compare_value, timeout_hint, Order::Acquire) };
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
        => signals::amd_wait_any(signal_count, signals, conds, values, timeout_hint, wait_hint, satisfying_value);
    export amd.hsa_amd_signal_async_handler_fn: fn hsa_amd_signal_async_handler(signal: Sig, cond: hsa_signal_condition_t, value: Val, handler: SignalHandler, arg: *mut c_void) -> hsa_status_t
        => signals::async_handler(signal, cond, value, handler, arg);
    export amd.hsa_amd_profiling_get_dispatch_time_fn: fn hsa_amd_profiling_get_dispatch_time(agent: hsa_agent_t, signal: Sig, time: *mut hsa_amd_profiling_dispatch_time_t) -> hsa_status_t
        => signals::get_dispatch_time(agent, signal, time);

    // --- queues ---
    export core.hsa_queue_create_fn: fn hsa_queue_create(agent: hsa_agent_t, size: u32, type_: hsa_queue_type32_t, callback: QueueErrorCallback, data: *mut c_void, private_segment_size: u32, group_segment_size: u32, queue: *mut *mut hsa_queue_t) -> hsa_status_t
        => queues::queue_create(agent, size, type_, callback, data, private_segment_size, group_segment_size, queue);
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
        => queues::set_profiler_enabled(queue, enable);
    table_only amd.hsa_amd_queue_intercept_create_fn: fn hsa_amd_queue_intercept_create(agent: hsa_agent_t, size: u32, type_: hsa_queue_type32_t, callback: QueueErrorCallback, data: *mut c_void, private_segment_size: u32, group_segment_size: u32, queue: *mut *mut hsa_queue_t) -> hsa_status_t
        => intercept::create(agent, size, type_, callback, data, private_segment_size, group_segment_size, queue);
    table_only amd.hsa_amd_queue_intercept_register_fn: fn hsa_amd_queue_intercept_register(queue: *mut hsa_queue_t, callback: InterceptHandler, user_data: *mut c_void) -> hsa_status_t
        => intercept::register(queue, callback, user_data);

    // --- code objects and executables ---
    export core.hsa_code_object_reader_create_from_memory_fn: fn hsa_code_object_reader_create_from_memory(code_object: *const c_void, size: usize, code_object_reader: *mut hsa_code_object_reader_t) -> hsa_status_t
        => loader::reader_create_from_memory(code_object, size, code_object_reader);
    export core.hsa_code_object_reader_destroy_fn: fn hsa_code_object_reader_destroy(code_object_reader: hsa_code_object_reader_t) -> hsa_status_t
        => loader::reader_destroy(code_object_reader);
    export core.hsa_executable_create_alt_fn: fn hsa_executable_create_alt(profile: hsa_profile_t, default_float_rounding_mode: hsa_default_float_rounding_mode_t, options: *const c_char, executable: *mut hsa_executable_t) -> hsa_status_t
        => loader::executable_create_alt(profile, default_float_rounding_mode, options, executable);
    export core.hsa_executable_load_agent_code_object_fn: fn hsa_executable_load_agent_code_object(executable: hsa_executable_t, agent: hsa_agent_t, code_object_reader: hsa_code_object_reader_t, options: *const c_char, loaded_code_object: *mut hsa_loaded_code_object_t) -> hsa_status_t
        => loader::load_agent_code_object(executable, agent, code_object_reader, options, loaded_code_object);
    export core.hsa_executable_freeze_fn: fn hsa_executable_freeze(executable: hsa_executable_t, options: *const c_char) -> hsa_status_t
        => executables::executable_freeze(executable, options);
    export core.hsa_executable_destroy_fn: fn hsa_executable_destroy(executable: hsa_executable_t) -> hsa_status_t
        => loader::executable_destroy(executable);
    export core.hsa_executable_get_symbol_by_name_fn: fn hsa_executable_get_symbol_by_name(executable: hsa_executable_t, symbol_name: *const c_char, agent: *const hsa_agent_t, symbol: *mut hsa_executable_symbol_t) -> hsa_status_t
        => executables::get_symbol_by_name(executable, symbol_name, agent, symbol);
    export core.hsa_executable_iterate_symbols_fn: fn hsa_executable_iterate_symbols(executable: hsa_executable_t, callback: SymbolCallback, data: *mut c_void) -> hsa_status_t
        => executables::iterate_symbols(executable, callback, data);
    export core.hsa_executable_symbol_get_info_fn: fn hsa_executable_symbol_get_info(executable_symbol: hsa_executable_symbol_t, attribute: hsa_executable_symbol_info_t, value: *mut c_void) -> hsa_status_t
        => executables::symbol_get_info(executable_symbol, attribute, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_headers_are_major_1_minor_sizeof_step_0() {
        let l = live();
        // SAFETY: the live tables are never freed.
        unsafe {
            assert_eq!(
                (*l.root).version,
                ApiTableVersion {
                    major_id: 1,
                    minor_id: 48,
                    step_id: 0,
                    reserved: 0
                }
            );
            assert_eq!((*l.core).version.minor_id, 1016);
            assert_eq!((*l.amd).version.minor_id, 400);
            assert_eq!((*l.root).core_, l.core);
        }
    }

    #[test]
    fn every_slot_is_non_null_and_unimplemented_ones_return_error() {
        let l = live();
        // SAFETY: reading the pointer words of the live tables.
        unsafe {
            for (base, size) in [(l.core as *const u8, 1016), (l.amd as *const u8, 400)] {
                for off in (16..size).step_by(8) {
                    assert_ne!(
                        *(base.add(off) as *const usize),
                        0,
                        "slot at offset {off} is null"
                    );
                }
            }
            let stub: unsafe extern "C" fn() -> u32 =
                std::mem::transmute((*l.core).hsa_soft_queue_create_fn.expect("stub"));
            assert_eq!(stub(), HSA_STATUS_ERROR);
        }
    }
}

// --- exported trampolines for the slots we do not implement ---------------
//
// Every other function ROCr exports is still exported (version ROCR_1) and
// still calls through the live table, so a tool can implement or wrap it; by
// default its slot holds the HSA_STATUS_ERROR stub. These trampolines are a
// two-instruction tail jump (arguments untouched), which needs the table
// pointers in plain statics set before any call: a constructor does it.

static CORE_TABLE: std::sync::atomic::AtomicPtr<CoreApiTable> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
static AMD_TABLE: std::sync::atomic::AtomicPtr<AmdExtTable> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

extern "C" fn publish_table_pointers() {
    let l = live();
    CORE_TABLE.store(l.core, Ordering::SeqCst);
    AMD_TABLE.store(l.amd, Ordering::SeqCst);
}

#[used]
#[unsafe(link_section = ".init_array")]
static PUBLISH_TABLE_POINTERS: extern "C" fn() = publish_table_pointers;

macro_rules! jump_exports {
    ($( $table:ident $struct_:ident . $field:ident => $name:ident ; )*) => {$(
        std::arch::global_asm!(
            concat!(".globl ", stringify!($name)),
            concat!(".type ", stringify!($name), ",@function"),
            concat!(stringify!($name), ":"),
            "mov rax, qword ptr [rip + {table}@GOTPCREL]",
            "mov rax, qword ptr [rax]",
            "jmp qword ptr [rax + {offset}]",
            concat!(".size ", stringify!($name), ", . - ", stringify!($name)),
            concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@@ROCR_1"),
            table = sym $table,
            offset = const std::mem::offset_of!($struct_, $field),
        );
    )*};
}

jump_exports! {
    CORE_TABLE CoreApiTable.hsa_system_extension_supported_fn => hsa_system_extension_supported;
    CORE_TABLE CoreApiTable.hsa_system_get_extension_table_fn => hsa_system_get_extension_table;
    CORE_TABLE CoreApiTable.hsa_soft_queue_create_fn => hsa_soft_queue_create;
    CORE_TABLE CoreApiTable.hsa_queue_inactivate_fn => hsa_queue_inactivate;
    CORE_TABLE CoreApiTable.hsa_agent_iterate_regions_fn => hsa_agent_iterate_regions;
    CORE_TABLE CoreApiTable.hsa_region_get_info_fn => hsa_region_get_info;
    CORE_TABLE CoreApiTable.hsa_agent_get_exception_policies_fn => hsa_agent_get_exception_policies;
    CORE_TABLE CoreApiTable.hsa_agent_extension_supported_fn => hsa_agent_extension_supported;
    CORE_TABLE CoreApiTable.hsa_memory_register_fn => hsa_memory_register;
    CORE_TABLE CoreApiTable.hsa_memory_deregister_fn => hsa_memory_deregister;
    CORE_TABLE CoreApiTable.hsa_memory_allocate_fn => hsa_memory_allocate;
    CORE_TABLE CoreApiTable.hsa_memory_assign_agent_fn => hsa_memory_assign_agent;
    CORE_TABLE CoreApiTable.hsa_isa_from_name_fn => hsa_isa_from_name;
    CORE_TABLE CoreApiTable.hsa_isa_get_info_fn => hsa_isa_get_info;
    CORE_TABLE CoreApiTable.hsa_isa_compatible_fn => hsa_isa_compatible;
    CORE_TABLE CoreApiTable.hsa_code_object_serialize_fn => hsa_code_object_serialize;
    CORE_TABLE CoreApiTable.hsa_code_object_deserialize_fn => hsa_code_object_deserialize;
    CORE_TABLE CoreApiTable.hsa_code_object_destroy_fn => hsa_code_object_destroy;
    CORE_TABLE CoreApiTable.hsa_code_object_get_info_fn => hsa_code_object_get_info;
    CORE_TABLE CoreApiTable.hsa_code_object_get_symbol_fn => hsa_code_object_get_symbol;
    CORE_TABLE CoreApiTable.hsa_code_symbol_get_info_fn => hsa_code_symbol_get_info;
    CORE_TABLE CoreApiTable.hsa_code_object_iterate_symbols_fn => hsa_code_object_iterate_symbols;
    CORE_TABLE CoreApiTable.hsa_executable_create_fn => hsa_executable_create;
    CORE_TABLE CoreApiTable.hsa_executable_load_code_object_fn => hsa_executable_load_code_object;
    CORE_TABLE CoreApiTable.hsa_executable_get_info_fn => hsa_executable_get_info;
    CORE_TABLE CoreApiTable.hsa_executable_global_variable_define_fn => hsa_executable_global_variable_define;
    CORE_TABLE CoreApiTable.hsa_executable_agent_global_variable_define_fn => hsa_executable_agent_global_variable_define;
    CORE_TABLE CoreApiTable.hsa_executable_readonly_variable_define_fn => hsa_executable_readonly_variable_define;
    CORE_TABLE CoreApiTable.hsa_executable_validate_fn => hsa_executable_validate;
    CORE_TABLE CoreApiTable.hsa_executable_get_symbol_fn => hsa_executable_get_symbol;
    CORE_TABLE CoreApiTable.hsa_extension_get_name_fn => hsa_extension_get_name;
    CORE_TABLE CoreApiTable.hsa_system_major_extension_supported_fn => hsa_system_major_extension_supported;
    CORE_TABLE CoreApiTable.hsa_agent_major_extension_supported_fn => hsa_agent_major_extension_supported;
    CORE_TABLE CoreApiTable.hsa_cache_get_info_fn => hsa_cache_get_info;
    CORE_TABLE CoreApiTable.hsa_agent_iterate_caches_fn => hsa_agent_iterate_caches;
    CORE_TABLE CoreApiTable.hsa_signal_group_create_fn => hsa_signal_group_create;
    CORE_TABLE CoreApiTable.hsa_signal_group_destroy_fn => hsa_signal_group_destroy;
    CORE_TABLE CoreApiTable.hsa_signal_group_wait_any_scacquire_fn => hsa_signal_group_wait_any_scacquire;
    CORE_TABLE CoreApiTable.hsa_signal_group_wait_any_relaxed_fn => hsa_signal_group_wait_any_relaxed;
    CORE_TABLE CoreApiTable.hsa_isa_get_exception_policies_fn => hsa_isa_get_exception_policies;
    CORE_TABLE CoreApiTable.hsa_isa_get_round_method_fn => hsa_isa_get_round_method;
    CORE_TABLE CoreApiTable.hsa_wavefront_get_info_fn => hsa_wavefront_get_info;
    CORE_TABLE CoreApiTable.hsa_isa_iterate_wavefronts_fn => hsa_isa_iterate_wavefronts;
    CORE_TABLE CoreApiTable.hsa_code_object_get_symbol_from_name_fn => hsa_code_object_get_symbol_from_name;
    CORE_TABLE CoreApiTable.hsa_code_object_reader_create_from_file_fn => hsa_code_object_reader_create_from_file;
    CORE_TABLE CoreApiTable.hsa_executable_load_program_code_object_fn => hsa_executable_load_program_code_object;
    CORE_TABLE CoreApiTable.hsa_executable_validate_alt_fn => hsa_executable_validate_alt;
    CORE_TABLE CoreApiTable.hsa_executable_iterate_agent_symbols_fn => hsa_executable_iterate_agent_symbols;
    CORE_TABLE CoreApiTable.hsa_executable_iterate_program_symbols_fn => hsa_executable_iterate_program_symbols;
    // Deprecated HSA 1.0 names: same slots as their sc* successors (as ROCr).
    CORE_TABLE CoreApiTable.hsa_queue_load_read_index_scacquire_fn => hsa_queue_load_read_index_acquire;
    CORE_TABLE CoreApiTable.hsa_queue_load_write_index_scacquire_fn => hsa_queue_load_write_index_acquire;
    CORE_TABLE CoreApiTable.hsa_queue_store_write_index_screlease_fn => hsa_queue_store_write_index_release;
    CORE_TABLE CoreApiTable.hsa_queue_cas_write_index_scacq_screl_fn => hsa_queue_cas_write_index_acq_rel;
    CORE_TABLE CoreApiTable.hsa_queue_cas_write_index_scacquire_fn => hsa_queue_cas_write_index_acquire;
    CORE_TABLE CoreApiTable.hsa_queue_cas_write_index_screlease_fn => hsa_queue_cas_write_index_release;
    CORE_TABLE CoreApiTable.hsa_queue_add_write_index_scacq_screl_fn => hsa_queue_add_write_index_acq_rel;
    CORE_TABLE CoreApiTable.hsa_queue_add_write_index_scacquire_fn => hsa_queue_add_write_index_acquire;
    CORE_TABLE CoreApiTable.hsa_queue_add_write_index_screlease_fn => hsa_queue_add_write_index_release;
    CORE_TABLE CoreApiTable.hsa_queue_store_read_index_screlease_fn => hsa_queue_store_read_index_release;
    CORE_TABLE CoreApiTable.hsa_signal_load_scacquire_fn => hsa_signal_load_acquire;
    CORE_TABLE CoreApiTable.hsa_signal_store_screlease_fn => hsa_signal_store_release;
    CORE_TABLE CoreApiTable.hsa_signal_wait_scacquire_fn => hsa_signal_wait_acquire;
    CORE_TABLE CoreApiTable.hsa_signal_and_scacquire_fn => hsa_signal_and_acquire;
    CORE_TABLE CoreApiTable.hsa_signal_and_screlease_fn => hsa_signal_and_release;
    CORE_TABLE CoreApiTable.hsa_signal_and_scacq_screl_fn => hsa_signal_and_acq_rel;
    CORE_TABLE CoreApiTable.hsa_signal_or_scacquire_fn => hsa_signal_or_acquire;
    CORE_TABLE CoreApiTable.hsa_signal_or_screlease_fn => hsa_signal_or_release;
    CORE_TABLE CoreApiTable.hsa_signal_or_scacq_screl_fn => hsa_signal_or_acq_rel;
    CORE_TABLE CoreApiTable.hsa_signal_xor_scacquire_fn => hsa_signal_xor_acquire;
    CORE_TABLE CoreApiTable.hsa_signal_xor_screlease_fn => hsa_signal_xor_release;
    CORE_TABLE CoreApiTable.hsa_signal_xor_scacq_screl_fn => hsa_signal_xor_acq_rel;
    CORE_TABLE CoreApiTable.hsa_signal_exchange_scacquire_fn => hsa_signal_exchange_acquire;
    CORE_TABLE CoreApiTable.hsa_signal_exchange_screlease_fn => hsa_signal_exchange_release;
    CORE_TABLE CoreApiTable.hsa_signal_exchange_scacq_screl_fn => hsa_signal_exchange_acq_rel;
    CORE_TABLE CoreApiTable.hsa_signal_add_scacquire_fn => hsa_signal_add_acquire;
    CORE_TABLE CoreApiTable.hsa_signal_add_screlease_fn => hsa_signal_add_release;
    CORE_TABLE CoreApiTable.hsa_signal_add_scacq_screl_fn => hsa_signal_add_acq_rel;
    CORE_TABLE CoreApiTable.hsa_signal_subtract_scacquire_fn => hsa_signal_subtract_acquire;
    CORE_TABLE CoreApiTable.hsa_signal_subtract_screlease_fn => hsa_signal_subtract_release;
    CORE_TABLE CoreApiTable.hsa_signal_subtract_scacq_screl_fn => hsa_signal_subtract_acq_rel;
    CORE_TABLE CoreApiTable.hsa_signal_cas_scacquire_fn => hsa_signal_cas_acquire;
    CORE_TABLE CoreApiTable.hsa_signal_cas_screlease_fn => hsa_signal_cas_release;
    CORE_TABLE CoreApiTable.hsa_signal_cas_scacq_screl_fn => hsa_signal_cas_acq_rel;
    AMD_TABLE AmdExtTable.hsa_amd_coherency_get_type_fn => hsa_amd_coherency_get_type;
    AMD_TABLE AmdExtTable.hsa_amd_coherency_set_type_fn => hsa_amd_coherency_set_type;
    AMD_TABLE AmdExtTable.hsa_amd_profiling_async_copy_enable_fn => hsa_amd_profiling_async_copy_enable;
    AMD_TABLE AmdExtTable.hsa_amd_profiling_get_async_copy_time_fn => hsa_amd_profiling_get_async_copy_time;
    AMD_TABLE AmdExtTable.hsa_amd_profiling_convert_tick_to_system_domain_fn => hsa_amd_profiling_convert_tick_to_system_domain;
    AMD_TABLE AmdExtTable.hsa_amd_async_function_fn => hsa_amd_async_function;
    AMD_TABLE AmdExtTable.hsa_amd_queue_cu_set_mask_fn => hsa_amd_queue_cu_set_mask;
    AMD_TABLE AmdExtTable.hsa_amd_memory_pool_can_migrate_fn => hsa_amd_memory_pool_can_migrate;
    AMD_TABLE AmdExtTable.hsa_amd_memory_migrate_fn => hsa_amd_memory_migrate;
    AMD_TABLE AmdExtTable.hsa_amd_memory_fill_fn => hsa_amd_memory_fill;
    AMD_TABLE AmdExtTable.hsa_amd_interop_map_buffer_fn => hsa_amd_interop_map_buffer;
    AMD_TABLE AmdExtTable.hsa_amd_interop_unmap_buffer_fn => hsa_amd_interop_unmap_buffer;
    AMD_TABLE AmdExtTable.hsa_amd_image_create_fn => hsa_amd_image_create;
    AMD_TABLE AmdExtTable.hsa_amd_pointer_info_set_userdata_fn => hsa_amd_pointer_info_set_userdata;
    AMD_TABLE AmdExtTable.hsa_amd_ipc_signal_create_fn => hsa_amd_ipc_signal_create;
    AMD_TABLE AmdExtTable.hsa_amd_ipc_signal_attach_fn => hsa_amd_ipc_signal_attach;
    AMD_TABLE AmdExtTable.hsa_amd_register_system_event_handler_fn => hsa_amd_register_system_event_handler;
    AMD_TABLE AmdExtTable.hsa_amd_queue_set_priority_fn => hsa_amd_queue_set_priority;
    AMD_TABLE AmdExtTable.hsa_amd_memory_async_copy_rect_fn => hsa_amd_memory_async_copy_rect;
    AMD_TABLE AmdExtTable.hsa_amd_runtime_queue_create_register_fn => hsa_amd_runtime_queue_create_register;
    AMD_TABLE AmdExtTable.hsa_amd_register_deallocation_callback_fn => hsa_amd_register_deallocation_callback;
    AMD_TABLE AmdExtTable.hsa_amd_deregister_deallocation_callback_fn => hsa_amd_deregister_deallocation_callback;
    AMD_TABLE AmdExtTable.hsa_amd_signal_value_pointer_fn => hsa_amd_signal_value_pointer;
    AMD_TABLE AmdExtTable.hsa_amd_svm_attributes_set_fn => hsa_amd_svm_attributes_set;
    AMD_TABLE AmdExtTable.hsa_amd_svm_attributes_get_fn => hsa_amd_svm_attributes_get;
    AMD_TABLE AmdExtTable.hsa_amd_svm_prefetch_async_fn => hsa_amd_svm_prefetch_async;
    AMD_TABLE AmdExtTable.hsa_amd_queue_cu_get_mask_fn => hsa_amd_queue_cu_get_mask;
}

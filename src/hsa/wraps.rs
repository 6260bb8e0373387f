//! The API-table entries ditto replaces, as ONE declaration list. Each line
//! names the table slot, the entry's parameters, whether ditto needs it
//! (`required`: start-up stops without it) and how ditto's part runs:
//! - `after`: the original runs, then, if it succeeded, ditto's hook
//!   (behind the panic funnel: a panic leaves the original's result);
//! - `before`: ditto's hook (funnelled), then the original;
//! - `instead`: ditto's handler gets the original and calls it itself
//!   (queue creation: the queue becomes an intercept queue).
//!
//! A hook is written `[.field.method]` (a method of the tool's state) or
//! `[path]` (a function taking the tool first). The table is `core`, `amd`
//! (the canonical ROCm 5.2 structs) or `amd_added` (AMD entries of later
//! releases, read by name; never required).
//!
//! From the list come, per line, a module with `entry` (the extern "C"
//! function written into the table) and `through` (the same with the tool
//! passed in, for tests), and [`install`] and [`missing_required`]: adding a
//! wrap is one line. Every hook lives with the state it changes:
//! `queues` (queue create/destroy), `tool` (allocations), the code-object
//! tracker (readers, loads, freeze).

use super::queues;
use super::tool::{HsaTool, TOOL};
use crate::guard::ffi_guard;
use hsa::versions::LiveTable;
use hsa::*;
use std::ffi::{c_char, c_void};

/// The live tables ditto writes its wraps into, each with its version's
/// layout.
#[derive(Debug)]
pub struct LiveTables {
    pub core: LiveTable,
    pub amd: LiveTable,
}

macro_rules! wraps {
    ($(
        $table:ident . $slot:ident => $name:ident ( $($arg:ident : $ty:ty),* $(,)? )
            $need:ident $how:ident [$($hook:tt)+];
    )*) => {
        $(
            #[doc = concat!("The wrap of `", stringify!($slot), "`.")]
            pub mod $name {
                use super::*;

                /// Written into the live table.
                ///
                /// # Safety
                /// Called by the runtime's trampoline with the entry's arguments.
                #[allow(clippy::too_many_arguments)]
                pub unsafe extern "C" fn entry($($arg: $ty),*) -> hsa_status_t {
                    let Some(tool) = TOOL.get() else {
                        return HSA_STATUS_ERROR_NOT_INITIALIZED;
                    };
                    // SAFETY: forwarded from the runtime's call.
                    unsafe { through(tool, $($arg),*) }
                }

                /// The wrap with the tool passed in.
                ///
                /// # Safety
                /// The entry's contract for the arguments.
                #[allow(clippy::too_many_arguments, unused_unsafe)]
                pub unsafe fn through(tool: &'static HsaTool, $($arg: $ty),*) -> hsa_status_t {
                    let Some(original) = tool.$table.$slot else {
                        return HSA_STATUS_ERROR;
                    };
                    wraps!(@$how stringify!($slot), tool, original, [$($hook)+], $($arg),*)
                }
            }
        )*

        /// Writes every wrap whose original entry the runtime has into the
        /// live tables, each at the offset of the table's version (an
        /// entry the saved copy has is one that version defines).
        ///
        /// # Safety
        /// `live` holds the runtime's live tables, valid for their
        /// `minor_id` bytes.
        pub unsafe fn install(live: &LiveTables, tool: &HsaTool) {
            $(
                if tool.$table.$slot.is_some() {
                    // SAFETY: the caller's contract; tools write their wraps
                    // into this table during OnLoad.
                    unsafe {
                        wraps!(@live live, $table)
                            .write(stringify!($slot), $name::entry as *const () as usize)
                    };
                }
            )*
        }

        /// The `required` wraps whose original the saved tables lack.
        pub fn missing_required(core: &CoreApiTable, amd: &AmdExtTable) -> Vec<&'static str> {
            let tables = (core, amd);
            let mut missing = Vec::new();
            $(
                if wraps!(@$need) && wraps!(@slot tables, $table).$slot.is_none() {
                    missing.push(stringify!($slot).trim_end_matches("_fn"));
                }
            )*
            missing
        }
    };
    (@required) => { true };
    (@optional) => { false };
    (@slot $tables:ident, core) => { $tables.0 };
    (@slot $tables:ident, amd) => { $tables.1 };
    // Entries added after ROCm 5.2 are never required.
    (@slot $tables:ident, amd_added) => { hsa::versions::AmdExtAdditions::default() };
    (@live $live:ident, core) => { $live.core };
    (@live $live:ident, amd) => { $live.amd };
    (@live $live:ident, amd_added) => { $live.amd };
    (@after $entry:expr, $tool:ident, $original:ident, $hook:tt, $($arg:ident),*) => {{
        // SAFETY: the original entry with the caller's arguments.
        let st = unsafe { $original($($arg),*) };
        if st == HSA_STATUS_SUCCESS {
            // SAFETY: the hook's contract is the entry's, after it succeeded.
            ffi_guard($entry, || unsafe { wraps!(@hook $hook $tool ($($arg),*)) }, || ());
        }
        st
    }};
    (@before $entry:expr, $tool:ident, $original:ident, $hook:tt, $($arg:ident),*) => {{
        // SAFETY: the hook's contract is the entry's, before it runs.
        ffi_guard($entry, || unsafe { wraps!(@hook $hook $tool ($($arg),*)) }, || ());
        // SAFETY: the original entry with the caller's arguments.
        unsafe { $original($($arg),*) }
    }};
    (@instead $entry:expr, $tool:ident, $original:ident, [$hook:path], $($arg:ident),*) => {{
        // SAFETY: the handler calls the original under the entry's contract.
        unsafe { $hook($tool, $original, $($arg),*) }
    }};
    // A hook is a method of the tool (`[.field.method]`) or a function
    // taking the tool first (`[path]`).
    (@hook [. $($segment:ident).+] $tool:ident ($($arg:ident),*)) => {
        $tool.$($segment).+($($arg),*)
    };
    (@hook [$hook:path] $tool:ident ($($arg:ident),*)) => {
        $hook($tool, $($arg),*)
    };
}

wraps! {
    core.hsa_queue_create_fn => queue_create(
        agent: hsa_agent_t, size: u32, type_: hsa_queue_type32_t, callback: QueueErrorCallback,
        data: *mut c_void, private_segment_size: u32, group_segment_size: u32,
        queue: *mut *mut hsa_queue_t,
    ) required instead [queues::create];
    // ROCm 10: HIP creates its compute queues through this one.
    amd_added.hsa_amd_queue_create_fn => amd_queue_create(
        agent: hsa_agent_t, descs: *mut hsa_amd_queue_create_desc_t, num_descs: u32,
    ) optional instead [queues::create_batch];
    core.hsa_queue_destroy_fn => queue_destroy(queue: *mut hsa_queue_t)
        optional after [queues::destroyed];
    // Virtual memory: a mapping is an allocation (pointer info cannot give
    // its start: ROCr answers with the address asked about).
    amd_added.hsa_amd_vmem_map_fn => vmem_map(
        va: *mut c_void, size: usize, in_offset: usize,
        memory_handle: hsa_amd_vmem_alloc_handle_t, flags: u64,
    ) optional after [.vmem_mapped];
    // Forgotten first, as a freed pool allocation.
    amd_added.hsa_amd_vmem_unmap_fn => vmem_unmap(va: *mut c_void, size: usize)
        optional before [.vmem_unmapping];
    amd.hsa_amd_memory_pool_allocate_fn => memory_pool_allocate(
        pool: hsa_amd_memory_pool_t, size: usize, flags: u32, ptr: *mut *mut c_void,
    ) required after [.allocated];
    // Forgotten first: no handle of a freed range may be exported.
    amd.hsa_amd_memory_pool_free_fn => memory_pool_free(ptr: *mut c_void)
        required before [.freeing];
    core.hsa_code_object_reader_create_from_memory_fn => code_object_reader_create_from_memory(
        code_object: *const c_void, size: usize, reader: *mut hsa_code_object_reader_t,
    ) optional after [.code_objects.reader_created];
    core.hsa_code_object_reader_destroy_fn => code_object_reader_destroy(
        reader: hsa_code_object_reader_t,
    ) optional after [.code_objects.reader_destroyed];
    core.hsa_executable_load_agent_code_object_fn => executable_load_agent_code_object(
        executable: hsa_executable_t, agent: hsa_agent_t, reader: hsa_code_object_reader_t,
        options: *const c_char, loaded_code_object: *mut hsa_loaded_code_object_t,
    ) optional after [.code_objects.code_object_loaded];
    core.hsa_executable_freeze_fn => executable_freeze(
        executable: hsa_executable_t, options: *const c_char,
    ) required after [.code_objects.executable_frozen];
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::lifecycle::Lifecycle;
    use crate::options::Options;
    use hsa::versions::Table;
    use std::cell::Cell;

    pub(crate) unsafe extern "C" fn any_entry() {}

    /// A table of `T` whose every entry is set (to a function never called).
    pub(crate) fn full_table<T: Copy>() -> T {
        let words = std::mem::size_of::<T>() / 8;
        let mut raw = vec![any_entry as *const () as usize; words];
        raw[0] = 1 | (std::mem::size_of::<T>() << 32);
        raw[1] = 0;
        // SAFETY: `raw` holds size_of::<T>() bytes of function pointers after
        // a valid version header; every table entry is an Option<fn>.
        unsafe { std::ptr::read(raw.as_ptr() as *const T) }
    }

    thread_local! {
        static ORIGINAL_CALLS: Cell<u32> = const { Cell::new(0) };
        static STATUS: Cell<hsa_status_t> = const { Cell::new(HSA_STATUS_SUCCESS) };
    }

    unsafe extern "C" fn fake_allocate(
        _pool: hsa_amd_memory_pool_t,
        size: usize,
        _flags: u32,
        ptr: *mut *mut c_void,
    ) -> hsa_status_t {
        ORIGINAL_CALLS.with(|n| n.set(n.get() + 1));
        // SAFETY: valid out-pointer from the caller.
        unsafe { *ptr = (0x40_0000 + size) as *mut c_void };
        STATUS.with(Cell::get)
    }

    unsafe extern "C" fn fake_free(_ptr: *mut c_void) -> hsa_status_t {
        ORIGINAL_CALLS.with(|n| n.set(n.get() + 1));
        HSA_STATUS_SUCCESS
    }

    fn tool() -> &'static HsaTool {
        // SAFETY: all-zero tables are valid (every entry None).
        let core: CoreApiTable = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut amd: AmdExtTable = unsafe { std::mem::zeroed() };
        amd.hsa_amd_memory_pool_allocate_fn = Some(fake_allocate);
        amd.hsa_amd_memory_pool_free_fn = Some(fake_free);
        static LIFECYCLE: Lifecycle = Lifecycle::capturing();
        let tool = HsaTool::new(Options::from_lookup(|_| None), core, amd, 0, &LIFECYCLE).0;
        Box::leak(Box::new(tool))
    }

    #[test]
    fn an_after_hook_runs_only_when_the_original_succeeded() {
        let tool = tool();
        let mut ptr = std::ptr::null_mut();
        let pool = hsa_amd_memory_pool_t { handle: 1 };
        STATUS.with(|s| s.set(HSA_STATUS_ERROR_OUT_OF_RESOURCES));
        // SAFETY: a valid out-pointer.
        let st = unsafe { memory_pool_allocate::through(tool, pool, 64, 0, &mut ptr) };
        assert_eq!(
            st, HSA_STATUS_ERROR_OUT_OF_RESOURCES,
            "the original's status"
        );
        assert!(tool.allocations.is_empty());
        STATUS.with(|s| s.set(HSA_STATUS_SUCCESS));
        // SAFETY: as above.
        let st = unsafe { memory_pool_allocate::through(tool, pool, 64, 0, &mut ptr) };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert_eq!(
            tool.allocations.find(0x40_0040 + 63).map(|a| a.size),
            Some(64)
        );
        // SAFETY: any pointer; the fake free ignores it.
        let st = unsafe { memory_pool_free::through(tool, ptr) };
        assert_eq!(st, HSA_STATUS_SUCCESS);
        assert!(
            tool.allocations.is_empty(),
            "forgotten before the original ran"
        );
        assert_eq!(ORIGINAL_CALLS.with(Cell::get), 3);
    }

    thread_local! {
        /// (engine_type, num_descs) of each call of the fake batch create.
        static BATCH_CALLS: std::cell::RefCell<Vec<(u8, u32)>> = const { std::cell::RefCell::new(Vec::new()) };
        /// The sizes (packets) of each intercept queue made.
        static INTERCEPT_SIZES: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    /// The runtime's hsa_amd_queue_create: refuses SDMA, and a compute
    /// descriptor whose size is not a power of two.
    unsafe extern "C" fn fake_batch_create(
        _agent: hsa_agent_t,
        descs: *mut hsa_amd_queue_create_desc_t,
        num_descs: u32,
    ) -> hsa_status_t {
        // SAFETY: the wrap passes one descriptor of the caller's.
        let d = unsafe { &mut *descs };
        BATCH_CALLS.with(|c| c.borrow_mut().push((d.engine_type, num_descs)));
        d.queue = std::ptr::null_mut();
        if d.engine_type == HSA_AMD_QUEUE_ENGINE_SDMA {
            HSA_STATUS_ERROR_INVALID_QUEUE_CREATION
        } else {
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        }
    }

    #[allow(clippy::too_many_arguments)]
    unsafe extern "C" fn fake_intercept_create(
        _agent: hsa_agent_t,
        size: u32,
        _type: hsa_queue_type32_t,
        _callback: QueueErrorCallback,
        _data: *mut c_void,
        _private: u32,
        _group: u32,
        queue: *mut *mut hsa_queue_t,
    ) -> hsa_status_t {
        INTERCEPT_SIZES.with(|s| s.borrow_mut().push(size));
        // SAFETY: all-zero is a valid queue struct; leaked, as a queue lives on.
        let q: &'static mut hsa_queue_t = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
        // SAFETY: the caller's out-pointer.
        unsafe { *queue = q };
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn fake_register(
        _queue: *mut hsa_queue_t,
        _handler: InterceptHandler,
        _data: *mut c_void,
    ) -> hsa_status_t {
        HSA_STATUS_SUCCESS
    }

    fn descriptor(engine_type: u8, size: u32) -> hsa_amd_queue_create_desc_t {
        // SAFETY: all-zero is a valid descriptor.
        let mut d: hsa_amd_queue_create_desc_t = unsafe { std::mem::zeroed() };
        d.version = HSA_AMD_QUEUE_CREATE_DESC_VERSION;
        d.engine_type = engine_type;
        d.queue_size_bytes = size;
        d.priority = HSA_AMD_QUEUE_PRIORITY_NORMAL;
        d.queue = 0x5a5a as *mut hsa_queue_t;
        d
    }

    #[test]
    fn a_batch_makes_compute_queues_intercept_queues_and_passes_the_rest_through() {
        // SAFETY: all-zero tables are valid (every entry None).
        let core: CoreApiTable = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut amd: AmdExtTable = unsafe { std::mem::zeroed() };
        amd.hsa_amd_queue_intercept_create_fn = Some(fake_intercept_create);
        amd.hsa_amd_queue_intercept_register_fn = Some(fake_register);
        static LIFECYCLE: Lifecycle = Lifecycle::capturing();
        let mut tool = HsaTool::new(Options::from_lookup(|_| None), core, amd, 0, &LIFECYCLE).0;
        tool.amd_added.hsa_amd_queue_create_fn = Some(fake_batch_create);
        let tool: &'static HsaTool = Box::leak(Box::new(tool));
        let mut descs = [
            descriptor(HSA_AMD_QUEUE_ENGINE_COMPUTE, 4096),
            descriptor(HSA_AMD_QUEUE_ENGINE_SDMA, 4096),
            // Malformed: the runtime judges it.
            descriptor(HSA_AMD_QUEUE_ENGINE_COMPUTE, 100),
            descriptor(HSA_AMD_QUEUE_ENGINE_COMPUTE, 1 << 16),
        ];
        let agent = hsa_agent_t { handle: 7 };
        // SAFETY: four descriptors of this test.
        let st = unsafe { amd_queue_create::through(tool, agent, descs.as_mut_ptr(), 4) };
        assert_eq!(
            st, HSA_STATUS_ERROR_INVALID_QUEUE_CREATION,
            "the first error"
        );
        assert_eq!(
            BATCH_CALLS.with(|c| c.borrow().clone()),
            [
                (HSA_AMD_QUEUE_ENGINE_SDMA, 1),
                (HSA_AMD_QUEUE_ENGINE_COMPUTE, 1)
            ],
            "each other descriptor alone, in order"
        );
        assert_eq!(INTERCEPT_SIZES.with(|s| s.borrow().clone()), [64, 1024]);
        let made: Vec<bool> = descs.iter().map(|d| d.queue.is_null()).collect();
        assert_eq!(made, [false, true, true, false], "failed ones are NULL");
        // SAFETY: ditto registered the two intercept queues it made.
        for q in [descs[0].queue, descs[3].queue] {
            assert_ne!(q, 0x5a5a as *mut hsa_queue_t);
            queues::destroyed(tool, q);
        }
    }

    #[test]
    fn a_wrap_without_its_original_fails_without_calling_anything() {
        let tool = tool();
        // SAFETY: the wrap returns before touching the argument.
        let st = unsafe { queue_destroy::through(tool, std::ptr::null_mut()) };
        assert_eq!(st, HSA_STATUS_ERROR);
    }

    #[test]
    fn full_tables_miss_nothing_and_get_every_wrap() {
        let core: CoreApiTable = full_table();
        let amd: AmdExtTable = full_table();
        assert_eq!(missing_required(&core, &amd), Vec::<&str>::new());
        static LIFECYCLE: Lifecycle = Lifecycle::capturing();
        let saved = HsaTool::new(Options::from_lookup(|_| None), core, amd, 0, &LIFECYCLE).0;
        let (mut live_core, mut live_amd) = (core, amd);
        // SAFETY: both are whole tables of this process, of 5.2's versions.
        let live = unsafe {
            LiveTables {
                core: LiveTable::new(Table::Core, &mut live_core as *mut _ as *mut u8).unwrap(),
                amd: LiveTable::new(Table::AmdExt, &mut live_amd as *mut _ as *mut u8).unwrap(),
            }
        };
        // SAFETY: both live tables are whole tables of this process.
        unsafe { install(&live, &saved) };
        assert_eq!(
            live_core.hsa_queue_destroy_fn.map(|f| f as usize),
            Some(queue_destroy::entry as *const () as usize)
        );
        assert_eq!(
            live_amd.hsa_amd_memory_pool_free_fn.map(|f| f as usize),
            Some(memory_pool_free::entry as *const () as usize)
        );
        assert_eq!(
            live_core.hsa_executable_freeze_fn.map(|f| f as usize),
            Some(executable_freeze::entry as *const () as usize)
        );
        // Entries ditto does not wrap are left as they were.
        assert_eq!(
            live_core.hsa_signal_create_fn.map(|f| f as usize),
            Some(any_entry as *const () as usize)
        );
    }

    #[test]
    fn wraps_are_written_at_the_offsets_of_the_tables_version() {
        let version = ApiTableVersion::new(2, 592, 5);
        let layout = hsa::versions::layout_of(Table::AmdExt, version).unwrap();
        let theirs = any_entry as *const () as usize;
        // A ROCm 6.4.3 AMD table, every entry set.
        let mut words = vec![theirs; 592 / 8];
        words[0] = 2 | (592 << 32);
        words[1] = 5;
        let mut core: CoreApiTable = full_table();
        // SAFETY: whole tables of this process.
        let live = unsafe {
            LiveTables {
                core: LiveTable::new(Table::Core, &mut core as *mut _ as *mut u8).unwrap(),
                amd: LiveTable::new(Table::AmdExt, words.as_mut_ptr() as *mut u8).unwrap(),
            }
        };
        // SAFETY: as above.
        let amd = unsafe { live.amd.amd_ext() };
        static LIFECYCLE: Lifecycle = Lifecycle::capturing();
        let saved = HsaTool::new(Options::from_lookup(|_| None), core, amd, 0, &LIFECYCLE).0;
        // SAFETY: as above.
        unsafe { install(&live, &saved) };
        let at = |name: &str| layout.offset(name, 592).unwrap() / 8;
        let allocate = at("hsa_amd_memory_pool_allocate_fn");
        let free = at("hsa_amd_memory_pool_free_fn");
        assert_eq!(
            words[allocate],
            memory_pool_allocate::entry as *const () as usize
        );
        assert_eq!(words[free], memory_pool_free::entry as *const () as usize);
        // Nothing else in the AMD table changed. (Both entries lie before
        // the entries 5.6 inserted, so 5.2's offsets are theirs too; the
        // moved entries ditto reads are pinned in registration's tests.)
        let changed: Vec<usize> = (2..words.len()).filter(|&i| words[i] != theirs).collect();
        assert_eq!(changed, [allocate, free]);
    }

    #[test]
    fn a_required_wrap_whose_original_is_absent_is_missing() {
        let core: CoreApiTable = full_table();
        let mut amd: AmdExtTable = full_table();
        amd.hsa_amd_memory_pool_free_fn = None;
        let mut no_destroy = core;
        no_destroy.hsa_queue_destroy_fn = None;
        assert_eq!(
            missing_required(&no_destroy, &amd),
            vec!["hsa_amd_memory_pool_free"],
            "queue destroy is optional"
        );
    }
}

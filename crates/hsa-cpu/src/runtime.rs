//! Runtime life cycle (ROCr `Runtime::Acquire/Release`). Owns the hsa_init
//! reference count and the loaded tools. The first hsa_init brings the
//! agents up (they are static here) and then loads tools; the last
//! hsa_shut_down runs OnUnload in reverse order, restores our own table
//! entries, and only then dlcloses the tools (no slot ever points into an
//! unloaded tool).
//!
//! Re-entrancy (differs from ROCr on purpose): ROCr holds its bootstrap lock
//! while tools load, so an OnLoad that calls hsa_init/hsa_shut_down
//! deadlocks. Here a call from the thread that is loading tools only adjusts
//! the count (the runtime is usable: agents exist) and returns SUCCESS; other
//! threads calling hsa_init meanwhile block until loading is done, as in ROCr.
//! Objects (signals, queues, memory) are not torn down at the last shut-down.
//!
//! The API table is `api`'s: the caller passes the root table tools get and
//! the function that puts our own entries back (this module never reaches
//! up into `api`).

use crate::tools::loading;
use hsa::*;
use std::cell::Cell;
use std::sync::Mutex;

struct Life {
    count: u32,
    tools: Vec<loading::LoadedTool>,
}

static LIFE: Mutex<Life> = Mutex::new(Life {
    count: 0,
    tools: Vec::new(),
});
/// Count adjustments made by OnLoad calls on the loading thread.
static NESTED: Mutex<i64> = Mutex::new(0);

thread_local! {
    static LOADING_TOOLS: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as the one loading tools; cleared on drop, also when
/// loading unwinds (a later hsa_init on this thread must not look nested).
struct LoadingTools;

impl LoadingTools {
    fn enter() -> Self {
        LOADING_TOOLS.with(|l| l.set(true));
        LoadingTools
    }
}

impl Drop for LoadingTools {
    fn drop(&mut self) {
        LOADING_TOOLS.with(|l| l.set(false));
    }
}

/// `hsa_init`; the first call hands `root_table` to the tools it loads,
/// loaded as `loading` says.
///
/// # Safety
/// `root_table` is a valid API table that outlives every tool.
pub unsafe fn init(root_table: *mut HsaApiTable, loading: loading::Loading) -> hsa_status_t {
    if LOADING_TOOLS.with(|l| l.get()) {
        *NESTED.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        return HSA_STATUS_SUCCESS;
    }
    let mut life = LIFE.lock().unwrap_or_else(|e| e.into_inner());
    if life.count == u32::MAX {
        return HSA_STATUS_ERROR_REFCOUNT_OVERFLOW;
    }
    life.count += 1;
    if life.count == 1 {
        let loaded = {
            let _loading = LoadingTools::enter();
            // SAFETY: `root_table` as our own contract says.
            unsafe { loading::load(root_table, loading) }
        };
        life.tools = loaded;
        let nested = std::mem::take(&mut *NESTED.lock().unwrap_or_else(|e| e.into_inner()));
        life.count = (life.count as i64 + nested).max(1) as u32;
    }
    HSA_STATUS_SUCCESS
}

/// `hsa_shut_down`; the last call runs `restore_tables` between the tools'
/// OnUnload and their dlclose.
pub fn shut_down(restore_tables: impl FnOnce()) -> hsa_status_t {
    if LOADING_TOOLS.with(|l| l.get()) {
        *NESTED.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        return HSA_STATUS_SUCCESS;
    }
    let mut life = LIFE.lock().unwrap_or_else(|e| e.into_inner());
    if life.count == 0 {
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    }
    life.count -= 1;
    if life.count == 0 {
        let loaded = std::mem::take(&mut life.tools);
        loading::run_on_unload(&loaded);
        // As ROCr's Unload: no async handler runs once the runtime is shut
        // down (nor, here, once the tools are about to be closed).
        crate::signals_and_queues::async_events::shut_down();
        restore_tables();
        loading::close(loaded);
    }
    HSA_STATUS_SUCCESS
}

/// Current reference count (tests, diagnostics).
pub fn reference_count() -> u32 {
    LIFE.lock().unwrap_or_else(|e| e.into_inner()).count
}

/// Names of the tools loaded by the first hsa_init, in load order.
pub fn loaded_tool_names() -> Vec<String> {
    LIFE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect()
}

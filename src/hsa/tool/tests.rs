//! The tool's tests over fake table entries: the signal pool, the IPC
//! handle cache, pointer info.

use super::pointer_info::allocation_described;
use super::*;
use crate::capture::BufferAccess;
use crate::capture::allocation_map::Allocation;
use crate::hsa::worker::{HeldBarrier, HeldSignals, PreHold};
use std::cell::Cell;

thread_local! {
    static IPC_EXPORTS: Cell<u32> = const { Cell::new(0) };
}

unsafe extern "C" fn counting_ipc_create(
    ptr: *mut c_void,
    _len: usize,
    handle: *mut hsa_amd_ipc_memory_t,
) -> hsa_status_t {
    IPC_EXPORTS.with(|n| n.set(n.get() + 1));
    // SAFETY: valid out-pointer from the caller.
    unsafe { (*handle).handle[0] = ptr as u32 ^ IPC_EXPORTS.with(|n| n.get()) };
    HSA_STATUS_SUCCESS
}

fn tool_with_ipc() -> HsaTool {
    // SAFETY: all-zero tables are valid (every entry None).
    let core: CoreApiTable = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut amd: AmdExtTable = unsafe { std::mem::zeroed() };
    amd.hsa_amd_ipc_memory_create_fn = Some(counting_ipc_create);
    IPC_EXPORTS.with(|n| n.set(0));
    static LIFECYCLE: Lifecycle = Lifecycle::capturing();
    HsaTool::new(Options::from_lookup(|_| None), core, amd, 0, &LIFECYCLE).0
}

unsafe extern "C" fn ignored_store(_signal: hsa_signal_t, _value: hsa_signal_value_t) {}

#[test]
fn recycling_a_job_that_held_inputs_returns_both_pairs_to_the_free_list() {
    let mut tool = tool_with_ipc();
    tool.core.hsa_signal_store_relaxed_fn = Some(ignored_store);
    tool.recycle(HeldBarrier {
        done: 1,
        hold: 2,
        pre: Some(PreHold {
            pre: 3,
            hold_pre: 4,
        }),
        app: 5,
    });
    let pair = |done, hold| HeldBarrier {
        done,
        hold,
        pre: None,
        app: 0,
    };
    assert_eq!(tool.take_pair(), Some(pair(1, 2)));
    assert_eq!(tool.take_pair(), Some(pair(3, 4)));
    assert_eq!(
        tool.take_pair(),
        None,
        "no more, and no signal_create entry"
    );
}

#[test]
fn a_tracked_allocation_is_exported_once_and_again_after_free_and_reuse() {
    let tool = tool_with_ipc();
    let a = Allocation {
        base: 0x10_0000,
        size: 4096,
    };
    tool.record_allocation(a.base, a.size);
    let first = tool.export(&a).unwrap();
    assert_eq!(tool.export(&a).unwrap(), first);
    assert_eq!(IPC_EXPORTS.with(|n| n.get()), 1, "cached");
    tool.forget_allocation(a.base);
    tool.record_allocation(a.base, a.size);
    tool.export(&a).unwrap();
    assert_eq!(IPC_EXPORTS.with(|n| n.get()), 2);
}

#[test]
fn a_base_allocated_again_without_a_seen_free_gets_a_fresh_handle() {
    let tool = tool_with_ipc();
    let a = Allocation {
        base: 0x20_0000,
        size: 4096,
    };
    tool.record_allocation(a.base, a.size);
    let old = tool.export(&a).unwrap();
    // Freed through an entry ditto does not wrap, then handed out again.
    tool.record_allocation(a.base, a.size);
    let new = tool.export(&a).unwrap();
    assert_eq!(IPC_EXPORTS.with(|n| n.get()), 2);
    assert_ne!(old, new, "the stale handle is never reused");
}

#[test]
fn an_allocation_known_only_through_pointer_info_is_never_cached() {
    let tool = tool_with_ipc();
    let untracked = Allocation {
        base: 0x30_0000,
        size: 64,
    };
    tool.export(&untracked).unwrap();
    tool.export(&untracked).unwrap();
    assert_eq!(IPC_EXPORTS.with(|n| n.get()), 2);
}

#[test]
fn pointer_info_of_a_virtual_memory_mapping_describes_no_allocation() {
    // ROCr: the address asked about as the base, the mapping's size.
    let mut info = hsa_amd_pointer_info_t {
        type_: HSA_EXT_POINTER_TYPE_HSA_VMEM,
        agentBaseAddress: 0x21_0000 as *mut c_void,
        sizeInBytes: 2 << 20,
        ..Default::default()
    };
    assert_eq!(allocation_described(&info, 0x21_0000), None);
    info.type_ = HSA_EXT_POINTER_TYPE_HSA;
    assert_eq!(
        allocation_described(&info, 0x21_0000),
        Some(Allocation {
            base: 0x21_0000,
            size: 2 << 20
        })
    );
}

//! The SDMA copy engines: `hsa_amd_memory_async_copy` and its
//! `_on_engine` form. A copy starts once its dependencies read 0 and
//! decrements its completion signal when done. What it reads follows the
//! visibility model (`visibility`): an allocation that a dispatch released
//! only at AGENT scope is read as its shadow holds it (the bytes before
//! that dispatch), in this process or through an IPC attachment, and each
//! such read is a `stale-read` trace event. A blit copy
//! (`hsa_memory_copy`, `allocations`) reads the memory itself.
//!
//! Over `allocations` and `ipc` (attachments).

use crate::memory::device_access::DeviceAccess;
use crate::memory::{allocations, ipc};
use crate::signals_and_queues::signals::{self, Order, Rmw};
use hsa::*;
use std::ffi::c_void;

/// One copy, as an SDMA engine does it.
///
/// # Safety
/// `dst` and `src` are addresses valid for `size` bytes (writes,
/// reads) until the copy is done.
unsafe fn engine_copy(dst: usize, src: usize, size: usize) {
    if size == 0 {
        return;
    }
    let _engine = DeviceAccess::enter();
    let region = allocations::device_region(src).or_else(|| ipc::attachment_region(src));
    if let Some(r) = region
        && src + size <= r.base + r.size as usize
        && r.is_stale()
    {
        crate::tools::trace::event(&format!(
            "stale-read 0x{src:x} {size} (released at agent scope only)"
        ));
        // SAFETY: `dst` holds `size` writable bytes (our contract).
        if unsafe { r.read_shadow((src - r.base) as u64, dst as *mut u8, size) } {
            return;
        }
    }
    // SAFETY: the caller of the API guarantees both ranges hold `size` bytes.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, size) };
}

/// Copies after every dependency reads 0, then decrements the completion
/// signal by 1. Runs inline when the dependencies are already satisfied,
/// otherwise on a helper thread (the caller never blocks).
///
/// # Safety
/// `dst` and `src` are null or valid for `size` bytes (writes, reads)
/// until the completion signal is decremented; `deps` is null or holds
/// `num_deps` signals.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn async_copy(
    dst: *mut c_void,
    _dst_agent: hsa_agent_t,
    src: *const c_void,
    _src_agent: hsa_agent_t,
    size: usize,
    num_deps: u32,
    deps: *const hsa_signal_t,
    completion: hsa_signal_t,
) -> hsa_status_t {
    if (size > 0 && (dst.is_null() || src.is_null())) || (num_deps > 0 && deps.is_null()) {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if completion.handle != 0 && signals::lookup(completion).is_none() {
        return HSA_STATUS_ERROR_INVALID_SIGNAL;
    }
    let deps: Vec<hsa_signal_t> = if num_deps == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller passes num_deps signals.
        unsafe { std::slice::from_raw_parts(deps, num_deps as usize) }.to_vec()
    };
    let ready = deps.iter().all(|d| signals::load(*d, Order::Acquire) == 0);
    let (dst, src) = (dst as usize, src as usize);
    let run = move || {
        for d in &deps {
            signals::wait(*d, HSA_SIGNAL_CONDITION_EQ, 0, u64::MAX, Order::Acquire);
        }
        // SAFETY: both ranges stay valid until the completion signal is
        // decremented (our contract), which happens after this copy.
        unsafe { engine_copy(dst, src, size) };
        if completion.handle != 0 {
            signals::rmw(completion, Rmw::Subtract, 1, Order::Release);
        }
    };
    if ready {
        run();
    } else {
        std::thread::Builder::new()
            .name("hsa-cpu-copy".into())
            .spawn(run)
            .ok();
    }
    HSA_STATUS_SUCCESS
}

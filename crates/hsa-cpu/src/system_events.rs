//! GPU system events (ROCr's `Runtime::SetCustomSystemEventHandler` and
//! `Runtime::VMFaultHandler`, 6.2–6.4). Owns the handlers registered with
//! `hsa_amd_register_system_event_handler` and what a GPU memory fault
//! does with them.
//!
//! As ROCr does (not as hsa_ext_amd.h says: "HSA_STATUS_ERROR if one is
//! registered already"), every registration appends its handler and
//! returns SUCCESS; a fault calls every handler, in registration order,
//! with an `HSA_AMD_GPU_MEMORY_FAULT_EVENT`. When none is registered, or
//! none returns HSA_STATUS_SUCCESS, ROCr's message goes to stderr (unless
//! HSA_ENABLE_VM_FAULT_MESSAGE=0):
//!
//! `Memory access fault by GPU node-N (Agent handle: 0x...) on address 0x.... Reason: ....`
//!
//! and the process aborts (abort(): SIGABRT). One difference: a null
//! callback is refused with HSA_STATUS_ERROR_INVALID_ARGUMENT (ROCr stores
//! it and would call it at the first fault).
//!
//! Over `agents` (a GPU's agent handle and driver node id).

use crate::agents;
use gpu_engine::kernel_faults::reason_text;
use hsa::*;
use std::ffi::c_void;
use std::sync::Mutex;

/// A registered handler with its data.
type Handler = (
    unsafe extern "C" fn(*const hsa_amd_event_t, *mut c_void) -> hsa_status_t,
    usize,
);

static HANDLERS: Mutex<Vec<Handler>> = Mutex::new(Vec::new());

/// Environment variable: "0" silences the memory-fault message (ROCr's flag).
pub const VM_FAULT_MESSAGE_ENV: &str = "HSA_ENABLE_VM_FAULT_MESSAGE";

/// `hsa_amd_register_system_event_handler`.
///
/// # Safety
/// `callback`, if any, may be called with an event and `data` on the
/// runtime's faults thread for the rest of the process.
pub(crate) unsafe fn register_handler(
    callback: hsa_amd_system_event_callback_t,
    data: *mut c_void,
) -> hsa_status_t {
    let Some(f) = callback else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    HANDLERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((f, data as usize));
    HSA_STATUS_SUCCESS
}

/// The driver node id GPU `gpu` reports (HSA_AMD_AGENT_INFO_DRIVER_NODE_ID:
/// node 0 is the CPU).
fn node_id(gpu: usize) -> u32 {
    1 + gpu as u32
}

/// A value as C's `%p` prints it (glibc: `(nil)` for null).
fn c_pointer(value: u64) -> String {
    if value == 0 {
        "(nil)".into()
    } else {
        format!("{value:#x}")
    }
}

/// ROCr's message for an unhandled memory fault (one line, with its newline).
pub fn fault_message(gpu: usize, address: u64, reason_mask: u32) -> String {
    let imprecise = if reason_mask & HSA_AMD_MEMORY_FAULT_IMPRECISE != 0 {
        "(may not be exact address)"
    } else {
        ""
    };
    format!(
        "Memory access fault by GPU node-{} (Agent handle: {}) on address {}{imprecise}. Reason: {}.\n",
        node_id(gpu),
        c_pointer(agents::gpu_agent(gpu).handle),
        c_pointer(address),
        reason_text(reason_mask),
    )
}

/// A memory fault of GPU `gpu` at `address`: calls every handler; returns
/// when one returned HSA_STATUS_SUCCESS, else prints ROCr's message and
/// aborts the process.
pub(crate) fn memory_fault(gpu: usize, address: u64, reason_mask: u32) {
    let handlers = HANDLERS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let event = hsa_amd_event_t {
        event_type: HSA_AMD_GPU_MEMORY_FAULT_EVENT,
        memory_fault: hsa_amd_gpu_memory_fault_info_t {
            agent: agents::gpu_agent(gpu),
            virtual_address: address,
            fault_reason_mask: reason_mask,
        },
    };
    let mut handled = false;
    for (f, data) in handlers {
        // SAFETY: the application's handler with its own data, as
        // `register_handler`'s caller vouched for them.
        if unsafe { f(&event, data as *mut c_void) } == HSA_STATUS_SUCCESS {
            handled = true;
        }
    }
    if handled {
        return;
    }
    if std::env::var(VM_FAULT_MESSAGE_ENV).as_deref() != Ok("0") {
        eprint!("{}", fault_message(gpu, address, reason_mask));
    }
    std::process::abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_rocr_s_with_c_pointers_and_the_first_reason() {
        assert_eq!(
            fault_message(0, 0xdead000, HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT),
            "Memory access fault by GPU node-1 (Agent handle: 0xd170a6e00002) on address \
             0xdead000. Reason: Page not present or supervisor privilege.\n"
        );
        assert_eq!(
            fault_message(
                1,
                0,
                HSA_AMD_MEMORY_FAULT_READ_ONLY | HSA_AMD_MEMORY_FAULT_IMPRECISE
            ),
            "Memory access fault by GPU node-2 (Agent handle: 0xd170a6e00012) on address \
             (nil)(may not be exact address). Reason: Write access to a read-only page.\n"
        );
        assert_eq!(
            reason_text(HSA_AMD_MEMORY_FAULT_NX),
            "Execute access to a page marked NX"
        );
        assert_eq!(reason_text(0), "Unknown");
    }
}

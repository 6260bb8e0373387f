//! The model GPU's command processor: one thread per registered AQL queue,
//! taking packets in order at the read index (an SDMA queue's thread runs
//! `sdma` instead).
//!
//! A slot is the processor's once the write index has passed it and its
//! header's type is no longer INVALID (the producer writes the header
//! last, with release semantics). Then:
//! - barrier-AND / barrier-OR: wait until every / any nonzero dependency
//!   signal's value is 0;
//! - AMD's barrier-value (vendor packet, format 2): wait until
//!   `(value & mask) cond compare` holds (at once when it names no signal);
//! - kernel dispatch: the kernel is found by its descriptor address among
//!   the code objects ROCr loaded (`loaded_code_objects`) and run by
//!   gpu-engine's `dispatch` (its host build, or CLR's blit kernel
//!   natively), on GPU 0's device access;
//! - AMD's PM4 indirect buffers (`pm4`).
//!
//! A packet the model cannot execute (a kernel found in no code object,
//! one that cannot run, as without its host build, or faults; an unknown
//! packet) is a GPU exception: the message, then the process aborts, as
//! ROCr aborts it on a GPU exception with no handler ([`fatal`]). Model
//! mode offers no way to raise ROCr's queue error or memory event (its
//! thunk's events never carry exceptions), and a stopped queue would leave
//! the application waiting for ever. A kernel's memory fault prints ROCr's
//! own line first (`Memory access fault by GPU node-N ... on address
//! 0x...`), then the model's, naming the kernel and its code object.
//!
//! After a packet the processor sets its header back to INVALID, advances
//! the read index (`read_dispatch_id`) and completes the completion signal
//! (value - 1, then its event). The thunk's doorbell writes reach no one
//! (the model is not told where the doorbell page lies), so an idle queue
//! is polled with a backoff from spinning to 1 ms sleeps.
//!
//! `DITTO_MODEL_GPU_EXECUTE=0` accepts queues and executes nothing: the
//! switch the tests use to see that what completes was completed here.

use crate::backoff::Backoff;
use crate::clock;
use crate::device::Shared;
use crate::interface::{QUEUE_TYPE_COMPUTE_AQL, QUEUE_TYPES_SDMA, QueueInfo};
use crate::loaded_code_objects;
use crate::pm4;
use crate::sdma;
use crate::signals::GpuSignal;
use gpu_engine::{dispatch, kernel_faults};
use hsa::{
    HSA_PACKET_TYPE_BARRIER_AND, HSA_PACKET_TYPE_BARRIER_OR, HSA_PACKET_TYPE_INVALID,
    HSA_PACKET_TYPE_KERNEL_DISPATCH, HSA_PACKET_TYPE_VENDOR_SPECIFIC,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::thread::JoinHandle;

/// `0` switches execution off (see the module header).
pub const EXECUTE_VAR: &str = "DITTO_MODEL_GPU_EXECUTE";

/// Bytes of an AQL packet.
const PACKET: u64 = 64;
/// AMD vendor packet formats (ROCr's amd_hsa_queue.h, hsa_ext_amd.h): a
/// PM4 indirect buffer, a barrier-value packet.
const AMD_FORMAT_PM4_IB: u8 = 1;
const AMD_FORMAT_BARRIER_VALUE: u8 = 2;

/// A queue being executed; dropping it stops and joins its thread.
pub struct QueueProcessor {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl QueueProcessor {
    pub fn start(gpu: Arc<Shared>, info: QueueInfo) -> Result<QueueProcessor, String> {
        let ring = Ring::new(&gpu, &info)?;
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let queue = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let stop = Arc::new(AtomicBool::new(false));
        if std::env::var_os(EXECUTE_VAR).is_some_and(|v| v == "0") {
            return Ok(QueueProcessor { stop, thread: None });
        }
        let thread_stop = stop.clone();
        let sdma = match info.queue_type {
            QUEUE_TYPE_COMPUTE_AQL => false,
            t if QUEUE_TYPES_SDMA.contains(&t) => true,
            other => {
                return Err(format!(
                    "queue type {other} is neither an AQL compute queue nor an SDMA queue; \
                     the model executes those only"
                ));
            }
        };
        let spawned = if sdma {
            let ring = sdma::SdmaRing {
                base: ring.base,
                size: u64::from(info.ring_size),
                write: ring.write,
                read: ring.read,
            };
            std::thread::Builder::new()
                .name("ditto-model-sdma".into())
                .spawn(move || {
                    let mut backoff = Backoff::default();
                    if let sdma::Stop::Refused(m) =
                        sdma::process(&gpu, &ring, &thread_stop, &mut backoff)
                    {
                        fatal(&format!("{m} (an SDMA queue)"));
                    }
                })
        } else {
            std::thread::Builder::new()
                .name("ditto-model-cp".into())
                .spawn(move || process(&gpu, ring, &thread_stop, queue))
        };
        let thread = spawned.map_err(|e| format!("could not start a queue thread: {e}"))?;
        Ok(QueueProcessor {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for QueueProcessor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A queue's ring and indices, as host addresses in the aperture.
struct Ring {
    base: usize,
    slots: u64,
    write: usize,
    read: usize,
}

impl Ring {
    fn new(gpu: &Shared, info: &QueueInfo) -> Result<Ring, String> {
        let size = u64::from(info.ring_size);
        if size < PACKET || !size.is_power_of_two() {
            return Err(format!(
                "queue ring of {size} bytes is not a power of two of 64-byte packets"
            ));
        }
        let at = |va: u64, len: u64, what: &str| {
            gpu.at(va, len).map(|p| p as usize).ok_or_else(|| {
                format!("the queue's {what} at 0x{va:x} is not memory mapped to the GPU")
            })
        };
        Ok(Ring {
            base: at(info.ring_base_address, size, "ring")?,
            slots: size / PACKET,
            write: at(info.write_pointer_address, 8, "write index")?,
            read: at(info.read_pointer_address, 8, "read index")?,
        })
    }

    fn index(&self, addr: usize) -> &AtomicU64 {
        // SAFETY: checked by `new` to lie in mapped GPU memory; the
        // indices are 8-byte aligned fields of amd_queue_t.
        unsafe { &*(addr as *const AtomicU64) }
    }

    fn slot(&self, index: u64) -> *mut u8 {
        (self.base + ((index % self.slots) * PACKET) as usize) as *mut u8
    }

    fn header(&self, slot: *mut u8) -> &AtomicU16 {
        // SAFETY: a slot is 64 bytes of the ring, 64-byte aligned.
        unsafe { &*(slot as *const AtomicU16) }
    }
}

/// Why the processor stopped taking packets.
enum Stopped {
    Destroyed,
    Refused(String),
}

fn process(gpu: &Shared, ring: Ring, stop: &AtomicBool, queue: u64) {
    let mut read = ring.index(ring.read).load(Ordering::Acquire);
    loop {
        match next_packet(&ring, read, stop) {
            Err(Stopped::Destroyed) => return,
            Err(Stopped::Refused(m)) => fatal(&m),
            Ok(slot) => {
                if let Err(stopped) = execute(gpu, slot, stop, queue) {
                    if let Stopped::Refused(m) = stopped {
                        fatal(&format!("{m} (packet {read} of its queue)"));
                    }
                    return;
                }
                // SAFETY: the slot's completion signal field (@56).
                let completion = unsafe { (slot.add(56) as *const u64).read_volatile() };
                ring.header(slot)
                    .store(u16::from(HSA_PACKET_TYPE_INVALID as u8), Ordering::Release);
                read += 1;
                ring.index(ring.read).store(read, Ordering::Release);
                if completion != 0 {
                    match GpuSignal::at(gpu, completion) {
                        Ok(signal) => signal.complete(),
                        Err(m) => eprintln!("ditto model GPU: packet {}: {m}", read - 1),
                    }
                }
            }
        }
    }
}

/// The slot of packet `read` once the producer has written it.
fn next_packet(ring: &Ring, read: u64, stop: &AtomicBool) -> Result<*mut u8, Stopped> {
    let mut backoff = Backoff::default();
    loop {
        if stop.load(Ordering::Acquire) {
            return Err(Stopped::Destroyed);
        }
        if ring.index(ring.write).load(Ordering::Acquire) > read {
            let slot = ring.slot(read);
            let header = ring.header(slot).load(Ordering::Acquire);
            if header & 0xff != HSA_PACKET_TYPE_INVALID {
                return Ok(slot);
            }
        }
        backoff.wait();
    }
}

/// The kernel each queue is running, by queue id, for the report of its
/// fault (which reaches [`report_kernel_fault`] on gpu-engine's faults
/// thread, the kernel's own thread parked).
static RUNNING: LazyLock<Mutex<HashMap<u64, RunningKernel>>> = LazyLock::new(Default::default);

/// What a fault report says of the kernel that faulted.
#[derive(Clone)]
struct RunningKernel {
    node: u32,
    /// The kernel's name, demangled where it is C++.
    name: String,
    code_object: String,
}

fn running() -> std::sync::MutexGuard<'static, HashMap<u64, RunningKernel>> {
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// `HSA_ENABLE_VM_FAULT_MESSAGE=0` silences ROCr's memory-fault line, as it
/// does ROCr's own.
const VM_FAULT_MESSAGE_VAR: &str = "HSA_ENABLE_VM_FAULT_MESSAGE";

/// A kernel's fault (reported by gpu-engine's fault handlers): the process
/// ends as ROCr ends it on a GPU exception with no handler. A memory fault
/// gets ROCr's own line (`Memory access fault by GPU node-N (Agent handle:
/// ...) on address 0x.... Reason: ....`; the model cannot know ROCr's agent
/// handle), then ditto's line naming the kernel.
fn report_kernel_fault(fault: kernel_faults::KernelFault) {
    let kernel = running().get(&fault.queue).cloned();
    let node = kernel.as_ref().map_or(1, |k| k.node);
    let what = match &kernel {
        Some(k) => format!("kernel {} (of {})", k.name, k.code_object),
        None => format!("a kernel of queue {}", fault.queue),
    };
    let how = match fault.kind() {
        kernel_faults::FaultKind::Memory => {
            let mask = fault.memory_reason();
            if std::env::var(VM_FAULT_MESSAGE_VAR).as_deref() != Ok("0") {
                eprintln!(
                    "Memory access fault by GPU node-{node} (Agent handle: unknown to the model) \
                     on address {}. Reason: {}.",
                    c_pointer(fault.address),
                    kernel_faults::reason_text(mask)
                );
            }
            let access = if fault.access & (1 << 4) != 0 {
                "an instruction fetch"
            } else if fault.access & (1 << 1) != 0 {
                "a write"
            } else {
                "a read"
            };
            format!(
                "faulted: {access} at address {}, memory no allocation of GPU node-{node} holds",
                c_pointer(fault.address)
            )
        }
        kernel_faults::FaultKind::IllegalInstruction => format!(
            "hit an illegal instruction (a trap) at 0x{:x}",
            fault.address
        ),
        kernel_faults::FaultKind::Arithmetic => {
            format!("raised an arithmetic exception at 0x{:x}", fault.address)
        }
    };
    fatal(&format!("{what} {how}"));
}

/// A value as C's `%p` prints it (glibc: `(nil)` for null), as ROCr's
/// message prints addresses.
fn c_pointer(value: u64) -> String {
    if value == 0 {
        "(nil)".into()
    } else {
        format!("{value:#x}")
    }
}

/// What a GPU exception comes to under ROCr with no handler: the message,
/// then the process aborts (ROCr's own reaction to a memory fault or an
/// invalid packet), so that nothing waits for ever on a queue that stopped
/// and no result is taken from a kernel that did not run.
pub fn fatal(message: &str) -> ! {
    eprintln!(
        "ditto model GPU: {message}; the application is aborted, as ROCr aborts it on a GPU \
         exception"
    );
    std::process::abort()
}

fn execute(gpu: &Shared, slot: *mut u8, stop: &AtomicBool, queue: u64) -> Result<(), Stopped> {
    // SAFETY: the slot is 64 bytes the producer handed over (header not
    // INVALID, read with acquire in next_packet).
    let packet: [u8; 64] = unsafe { (slot as *const [u8; 64]).read_volatile() };
    let u64_at = |o: usize| u64::from_le_bytes(packet[o..o + 8].try_into().unwrap_or([0; 8]));
    let kind = u16::from_le_bytes([packet[0], packet[1]]) & 0xff;
    match kind {
        HSA_PACKET_TYPE_BARRIER_AND | HSA_PACKET_TYPE_BARRIER_OR => {
            let deps: Vec<u64> = (0..5)
                .map(|i| u64_at(8 + 8 * i))
                .filter(|&h| h != 0)
                .collect();
            let signals = deps
                .iter()
                .map(|&h| GpuSignal::at(gpu, h))
                .collect::<Result<Vec<_>, _>>()
                .map_err(Stopped::Refused)?;
            let any = kind == HSA_PACKET_TYPE_BARRIER_OR;
            wait_until(stop, || {
                if any {
                    signals.is_empty() || signals.iter().any(|s| s.load() == 0)
                } else {
                    signals.iter().all(|s| s.load() == 0)
                }
            })
        }
        // No signal: nothing to wait for. CLR sends such packets (signal 0,
        // value 0, mask 0, EQ) as ordering points with a completion signal
        // (`dispatchBarrierValuePacket` with no dependency to resolve); the
        // command processor completes them at once.
        HSA_PACKET_TYPE_VENDOR_SPECIFIC
            if packet[2] == AMD_FORMAT_BARRIER_VALUE && u64_at(8) == 0 =>
        {
            Ok(())
        }
        HSA_PACKET_TYPE_VENDOR_SPECIFIC if packet[2] == AMD_FORMAT_BARRIER_VALUE => {
            let signal = GpuSignal::at(gpu, u64_at(8)).map_err(Stopped::Refused)?;
            let value = u64_at(16) as i64;
            let mask = u64_at(24) as i64;
            let cond = u32::from_le_bytes([packet[32], packet[33], packet[34], packet[35]]);
            wait_until(stop, || {
                let v = signal.load() & mask;
                match cond {
                    0 => v == value,
                    1 => v != value,
                    2 => v < value,
                    _ => v >= value,
                }
            })
        }
        HSA_PACKET_TYPE_VENDOR_SPECIFIC if packet[2] == AMD_FORMAT_PM4_IB => {
            let dword = |i: usize| {
                u32::from_le_bytes(packet[4 + 4 * i..8 + 4 * i].try_into().unwrap_or([0; 4]))
            };
            pm4::execute_indirect_buffer(gpu, [dword(0), dword(1), dword(2), dword(3)])
                .map_err(Stopped::Refused)
        }
        HSA_PACKET_TYPE_KERNEL_DISPATCH => {
            let object = u64_at(32);
            let Some(kernel) = loaded_code_objects::kernel_at(object) else {
                let listed: Vec<String> = loaded_code_objects::listed()
                    .iter()
                    .map(|(at, uri)| format!("{uri} at 0x{at:x}"))
                    .collect();
                return Err(Stopped::Refused(format!(
                    "dispatch of kernel object 0x{object:x}, in no code object ROCr loaded \
                     (its loader lists {}: {})",
                    listed.len(),
                    listed.join(", ")
                )));
            };
            // SAFETY: 64 bytes read as the packet type they say they are.
            let d: hsa::hsa_kernel_dispatch_packet_t = unsafe { std::mem::transmute(packet) };
            kernel_faults::set_reporter(report_kernel_fault);
            let name =
                ditto_kernels::names::demangle(&kernel.name).unwrap_or_else(|| kernel.name.clone());
            running().insert(
                queue,
                RunningKernel {
                    node: gpu.node(),
                    name,
                    code_object: kernel.code_object.clone(),
                },
            );
            // SAFETY: the application published this packet for the GPU:
            // its kernarg and the pointers in it are what the kernel reads.
            let start = clock::now();
            let status = unsafe { dispatch::run(&d, kernel.record, false, 0, queue) };
            let end = clock::now();
            running().remove(&queue);
            if d.completion_signal.handle != 0
                && let Ok(signal) = GpuSignal::at(gpu, d.completion_signal.handle)
            {
                signal.set_times(start, end);
            }
            if status != hsa::HSA_STATUS_SUCCESS {
                fatal(&format!(
                    "kernel {} (of {}) could not run (status 0x{status:x}; the reason is above)",
                    kernel.name, kernel.code_object
                ));
            }
            Ok(())
        }
        other => Err(Stopped::Refused(format!(
            "packet type {other} (vendor format {}) is not one the model executes",
            packet[2]
        ))),
    }
}

/// Polls `ready` with backoff until it holds or the queue is destroyed.
fn wait_until(stop: &AtomicBool, mut ready: impl FnMut() -> bool) -> Result<(), Stopped> {
    let mut backoff = Backoff::default();
    while !ready() {
        if stop.load(Ordering::Acquire) {
            return Err(Stopped::Destroyed);
        }
        backoff.wait();
    }
    Ok(())
}

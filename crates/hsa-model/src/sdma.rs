//! The model GPU's SDMA engines: one thread per registered SDMA queue
//! (ROCr creates them for `hsa_amd_memory_async_copy`, HIP's host↔device
//! copies), executing the SDMA 4 packets ROCr's `BlitSdma` writes for
//! gfx9 (ROCr's amd_blit_sdma.cpp and sdma_registers.h):
//! - NOP (op 0): `count` more dwords skipped (ROCr pads with it);
//! - COPY_LINEAR (op 1): `count + 1` bytes from `src` to `dst`;
//! - FENCE (op 5): a 32-bit write; the write of a signal's event id into
//!   its mailbox is skipped when the mailbox is not GPU memory (model mode
//!   gives events a placeholder mailbox; the TRAP after it is what wakes);
//! - TRAP (op 6): sets the event `int_ctx`, as the interrupt would;
//! - POLL_REGMEM (op 8): waits until `(mem & mask) func value` holds; an
//!   HDP-flush poll (a register, bit 26) has nothing to flush here;
//! - ATOMIC (op 10): 64-bit add (ROCr's signal decrement, `src` = -1);
//! - CONSTANT_FILL (op 11): `count + 1` bytes of a 32-bit pattern;
//! - TIMESTAMP (op 13, get global): the model's clock (`clock`).
//!
//! The ring is bytes; its read and write pointers are byte offsets that
//! only grow (ROCr's gfx9 rings are monotonic). Anything else is a GPU
//! exception naming the opcode (`packet_processor::fatal`): nothing is
//! skipped silently.

use crate::backoff::Backoff;
use crate::device::Shared;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};

const OP_NOP: u32 = 0;
const OP_COPY: u32 = 1;
const OP_FENCE: u32 = 5;
const OP_TRAP: u32 = 6;
const OP_POLL_REGMEM: u32 = 8;
const OP_ATOMIC: u32 = 10;
const OP_CONST_FILL: u32 = 11;
const OP_TIMESTAMP: u32 = 13;
/// `SDMA_ATOMIC_ADD64`.
const ATOMIC_ADD64: u32 = 47;
/// Largest single copy or fill the model performs (ROCr splits at 4 MiB
/// on gfx9; a larger count means a corrupt packet).
const MAX_BYTES: u64 = 1 << 30;

/// A queue's byte ring and pointers, as host addresses in the aperture.
pub struct SdmaRing {
    pub base: usize,
    pub size: u64,
    pub write: usize,
    pub read: usize,
}

/// Why the engine stopped.
pub enum Stop {
    Destroyed,
    Refused(String),
}

fn pointer(p: usize) -> &'static AtomicU64 {
    // SAFETY: the caller checked `p` lies in mapped GPU memory, 8-byte
    // aligned (amd_queue_t / the SDMA queue's pointer words).
    unsafe { &*(p as *const AtomicU64) }
}

/// Executes the queue until it is destroyed or a packet is refused.
pub fn process(gpu: &Shared, ring: &SdmaRing, stop: &AtomicBool, backoff: &mut Backoff) -> Stop {
    let mut read = pointer(ring.read).load(Ordering::Acquire);
    loop {
        while pointer(ring.write).load(Ordering::Acquire) <= read {
            if stop.load(Ordering::Acquire) {
                return Stop::Destroyed;
            }
            backoff.wait();
        }
        backoff.reset();
        let dword = |i: u64| -> u32 {
            let at = (read + 4 * i) % ring.size;
            // SAFETY: `at` is inside the ring (mapped, checked at start).
            unsafe { ((ring.base + at as usize) as *const u32).read_volatile() }
        };
        let header = dword(0);
        let (op, sub_op) = (header & 0xff, (header >> 8) & 0xff);
        let result = match op {
            OP_NOP => Ok(1 + u64::from((header >> 16) & 0x3fff)),
            OP_COPY if sub_op == 0 => {
                let bytes = u64::from(dword(1) & 0x3f_ffff) + 1;
                let src = u64::from(dword(3)) | (u64::from(dword(4)) << 32);
                let dst = u64::from(dword(5)) | (u64::from(dword(6)) << 32);
                copy(gpu, src, dst, bytes).map(|()| 7)
            }
            OP_FENCE => {
                let addr = u64::from(dword(1)) | (u64::from(dword(2)) << 32);
                let data = dword(3);
                let next = dword(4);
                let mailbox = next & 0xff == OP_TRAP && dword(5) & 0x0fff_ffff == data;
                match gpu.at(addr, 4) {
                    Some(p) => {
                        // SAFETY: 4 bytes of mapped GPU memory.
                        unsafe { &*(p as *const AtomicU32) }.store(data, Ordering::Release);
                        Ok(4)
                    }
                    None if mailbox => Ok(4),
                    None => Err(Stop::from(format!(
                        "SDMA fence to 0x{addr:x}, which is not GPU memory"
                    ))),
                }
            }
            OP_TRAP => {
                gpu.set_event(dword(1) & 0x0fff_ffff);
                Ok(2)
            }
            OP_POLL_REGMEM => {
                let hdp_flush = header & (1 << 26) != 0;
                let on_memory = header & (1 << 31) != 0;
                if hdp_flush || !on_memory {
                    Ok(6)
                } else {
                    let addr = u64::from(dword(1)) | (u64::from(dword(2)) << 32);
                    let (value, mask, func) = (dword(3), dword(4), (header >> 28) & 7);
                    poll(gpu, addr, value, mask, func, stop, backoff).map(|()| 6)
                }
            }
            OP_ATOMIC => {
                let operation = header >> 25;
                let addr = u64::from(dword(1)) | (u64::from(dword(2)) << 32);
                let src = u64::from(dword(3)) | (u64::from(dword(4)) << 32);
                match (operation, gpu.at(addr, 8)) {
                    (ATOMIC_ADD64, Some(p)) => {
                        // SAFETY: 8 bytes of mapped GPU memory; ROCr's
                        // signal values are 8-byte aligned.
                        unsafe { &*(p as *const AtomicI64) }
                            .fetch_add(src as i64, Ordering::AcqRel);
                        Ok(8)
                    }
                    (ATOMIC_ADD64, None) => Err(Stop::from(format!(
                        "SDMA atomic on 0x{addr:x}, which is not GPU memory"
                    ))),
                    (other, _) => Err(Stop::from(format!(
                        "SDMA atomic operation {other} is not one the model executes"
                    ))),
                }
            }
            OP_CONST_FILL => {
                let dst = u64::from(dword(1)) | (u64::from(dword(2)) << 32);
                let pattern = dword(3);
                let bytes = u64::from(dword(4) & 0x3f_ffff) + 1;
                fill(gpu, dst, pattern, bytes).map(|()| 5)
            }
            OP_TIMESTAMP if sub_op == 2 => {
                let addr = u64::from(dword(1)) | (u64::from(dword(2)) << 32);
                match gpu.at(addr, 8) {
                    Some(p) => {
                        let now = crate::clock::now();
                        // SAFETY: 8 bytes of mapped GPU memory.
                        unsafe { &*(p as *const AtomicU64) }.store(now, Ordering::Release);
                        Ok(3)
                    }
                    None => Err(Stop::from(format!(
                        "SDMA timestamp to 0x{addr:x}, which is not GPU memory"
                    ))),
                }
            }
            other => Err(Stop::from(format!(
                "SDMA opcode {other} (sub-op {sub_op}) is not one the model executes"
            ))),
        };
        match result {
            Ok(dwords) => {
                read += 4 * dwords;
                pointer(ring.read).store(read, Ordering::Release);
            }
            Err(Stop::Destroyed) => return Stop::Destroyed,
            Err(Stop::Refused(m)) => return Stop::Refused(m),
        }
    }
}

impl From<String> for Stop {
    fn from(m: String) -> Stop {
        Stop::Refused(m)
    }
}

fn span(gpu: &Shared, va: u64, bytes: u64, what: &str) -> Result<*mut u8, Stop> {
    if bytes > MAX_BYTES {
        return Err(Stop::Refused(format!("SDMA {what} of {bytes} bytes")));
    }
    gpu.at(va, bytes).ok_or_else(|| {
        Stop::Refused(format!(
            "SDMA {what} of {bytes} bytes at 0x{va:x}, which is not GPU memory"
        ))
    })
}

fn copy(gpu: &Shared, src: u64, dst: u64, bytes: u64) -> Result<(), Stop> {
    let from = span(gpu, src, bytes, "copy source")?;
    let to = span(gpu, dst, bytes, "copy destination")?;
    // SAFETY: both ranges are mapped GPU memory of `bytes` bytes; an
    // overlapping copy is the application's (a GPU gives no order either).
    unsafe { std::ptr::copy(from, to, bytes as usize) };
    std::sync::atomic::fence(Ordering::Release);
    Ok(())
}

fn fill(gpu: &Shared, dst: u64, pattern: u32, bytes: u64) -> Result<(), Stop> {
    let to = span(gpu, dst, bytes, "fill")?;
    let pattern = pattern.to_le_bytes();
    for i in 0..bytes as usize {
        // SAFETY: inside the checked range.
        unsafe { to.add(i).write(pattern[i % 4]) };
    }
    std::sync::atomic::fence(Ordering::Release);
    Ok(())
}

fn poll(
    gpu: &Shared,
    addr: u64,
    value: u32,
    mask: u32,
    func: u32,
    stop: &AtomicBool,
    backoff: &mut Backoff,
) -> Result<(), Stop> {
    let p = span(gpu, addr, 4, "poll")?;
    // SAFETY: 4 bytes of mapped GPU memory.
    let cell = unsafe { &*(p as *const AtomicU32) };
    loop {
        let v = cell.load(Ordering::Acquire) & mask;
        let holds = match func {
            0 => true,
            1 => v < value,
            2 => v <= value,
            3 => v == value,
            4 => v != value,
            5 => v >= value,
            6 => v > value,
            _ => return Err(Stop::Refused(format!("SDMA poll function {func}"))),
        };
        if holds {
            return Ok(());
        }
        if stop.load(Ordering::Acquire) {
            return Err(Stop::Destroyed);
        }
        backoff.wait();
    }
}

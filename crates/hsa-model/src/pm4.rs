//! PM4 command buffers ROCr hands the GPU in AMD's PM4-IB vendor packet
//! (`amd_aql_pm4_ib`: an INDIRECT_BUFFER command in the packet's first
//! four dwords, jumping to a buffer of type-3 PM4 commands). ROCr sends
//! them for cache maintenance (ACQUIRE_MEM after loading code objects,
//! RELEASE_MEM) and NOPs. The model has no caches to keep, so those are
//! done when read; any other command is refused, naming its opcode, so an
//! unexpected one is found rather than skipped.

use crate::device::Shared;

const TYPE3: u32 = 3;
const OP_NOP: u32 = 0x10;
const OP_INDIRECT_BUFFER: u32 = 0x3f;
const OP_ACQUIRE_MEM: u32 = 0x58;
const OP_RELEASE_MEM: u32 = 0x49;
/// Longest indirect buffer followed (dwords); ROCr's are a few dozen.
const MAX_DWORDS: u64 = 1 << 16;

/// Fields of a type-3 PM4 header: (type, opcode, body dwords).
fn header(h: u32) -> (u32, u32, u64) {
    (h >> 30, (h >> 8) & 0xff, u64::from((h >> 16) & 0x3fff) + 1)
}

/// Runs the indirect buffer the packet's INDIRECT_BUFFER command names.
pub fn execute_indirect_buffer(gpu: &Shared, jump: [u32; 4]) -> Result<(), String> {
    let (kind, op, _) = header(jump[0]);
    if kind != TYPE3 || op != OP_INDIRECT_BUFFER {
        return Err(format!(
            "PM4-IB packet without an INDIRECT_BUFFER command (header 0x{:08x})",
            jump[0]
        ));
    }
    let address = (u64::from(jump[2] & 0xffff) << 32) | u64::from(jump[1] & !3);
    let dwords = u64::from(jump[3] & 0xfffff);
    if dwords > MAX_DWORDS {
        return Err(format!("PM4 indirect buffer of {dwords} dwords"));
    }
    let base = gpu.at(address, dwords * 4).ok_or_else(|| {
        format!("PM4 indirect buffer at 0x{address:x} is not in memory mapped to the GPU")
    })?;
    // SAFETY: `dwords` dwords at `base` lie in mapped GPU memory (`at`).
    let buffer = unsafe { std::slice::from_raw_parts(base as *const u32, dwords as usize) };
    let mut i = 0usize;
    while i < buffer.len() {
        let (kind, op, body) = header(buffer[i]);
        if kind != TYPE3 {
            return Err(format!(
                "PM4 command of type {kind} (header 0x{:08x})",
                buffer[i]
            ));
        }
        match op {
            OP_NOP | OP_ACQUIRE_MEM | OP_RELEASE_MEM => {}
            other => {
                return Err(format!(
                    "PM4 opcode 0x{other:02x} is not one the model executes"
                ));
            }
        }
        i += 1 + body as usize;
    }
    Ok(())
}

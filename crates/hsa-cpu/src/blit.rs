//! CLR's blit kernels, run natively. The real HIP runtime (libamdhip64)
//! loads its own AMDGPU code object of blit kernels and dispatches them on
//! the application's queue for device-to-device copies, fills and stream
//! memory operations. Their machine code cannot run here, so each kernel
//! the runtime knows by name is implemented below from its argument layout
//! (the code object's `NT_AMDGPU_METADATA`, ROCm 5.2.3's blit code object,
//! checked at load by [`Blit::check_layout`]) and from what CLR puts in
//! the arguments. Owns those layouts and meanings; never touches the grid:
//! a blit does its whole job in one call, whatever the packet's geometry.
//!
//! Arguments (byte offsets in the kernarg segment; pointers are device
//! addresses, which are host addresses here):
//! - `__amd_rocclr_copyBuffer(srcI@0, dstI@8, srcOrigin@16, dstOrigin@24,
//!   size@32, remain:u32@40)`: CLR passes `size` = bytes / 4 + 1 and
//!   `remain` = bytes % 4: copies (size - 1) * 4 + remain bytes from
//!   srcI + srcOrigin to dstI + dstOrigin.
//! - `__amd_rocclr_copyBufferAligned(src@0, dst@8, srcOrigin@16,
//!   dstOrigin@24, size@32, alignment:u32@40)`: copies size * alignment
//!   bytes from src + srcOrigin to dst + dstOrigin.
//! - `__amd_rocclr_copyBufferRect[Aligned](src@0, dst@8, srcRect:ulong4@32,
//!   dstRect:ulong4@64, size:ulong4@96)`: rect = (row pitch, slice pitch,
//!   start, _) in elements, size = (row elements, rows, slices, element
//!   bytes); elements are bytes for Rect, `size.w` bytes (1, 2, 4, 8, 16;
//!   CLR passes 16 for 16-byte aligned copies) for RectAligned; element
//!   (x, y, z) is at start + x + y * row pitch + z * slice pitch. (As
//!   observed from hipMemcpy2D on the real HIP runtime 5.2.3:
//!   tests/hip/blit_checks.hip copy_2d, copy_2d_aligned.)
//! - `__amd_rocclr_fillBufferAligned(bufUChar@0, bufUShort@8, bufUInt@16,
//!   bufULong@24, pattern@32, patternSize:u32@40, offset@48, size@56)`:
//!   CLR sets the one buffer pointer whose element size (1, 2, 4, 8 bytes)
//!   it chose and leaves the others null; patternSize is in elements,
//!   offset in elements, size in patterns: element offset + i * patternSize
//!   + j gets pattern element j, for every pattern i < size.
//! - `__amd_rocclr_fillBufferAligned2D(…, patternSize@40, offset@48,
//!   width@56, height@64, pitch@72)`: the same per row: row r starts at
//!   element offset + r * pitch and gets `width` patterns, `height` rows.
//! - `__amd_rocclr_streamOpsWrite(ptrInt@0, ptrUlong@8, value@16,
//!   sizeBytes@24)`: writes value to the 8-byte word at ptrUlong when
//!   sizeBytes is 8, else its low 32 bits to the word at ptrInt (CLR sets
//!   the pointer that fits the size).
//! - `__amd_rocclr_streamOpsWait(ptrInt@0, ptrUlong@8, value@16, flags@24,
//!   mask@32)`: waits until (word & mask) compares true with value: flags
//!   0 `>=`, 1 `==`, 2 `(word & mask) != 0`, 3 `!((word & mask) | value) != 0`
//!   (hipStreamWaitValueGte/Eq/And/Nor), on the 64-bit word at ptrUlong if
//!   it is set, else the 32-bit word at ptrInt.
//!
//! Other kernels of the blit code object (`__amd_rocclr_initHeap`,
//! `__amd_rocclr_gwsInit`, image kernels) are not implemented: dispatching
//! one fails with a message naming it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A blit kernel this runtime implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blit {
    CopyBuffer,
    CopyBufferAligned,
    CopyBufferRect,
    CopyBufferRectAligned,
    FillBufferAligned,
    FillBufferAligned2D,
    StreamOpsWrite,
    StreamOpsWait,
}

/// Upper bound of one wait of streamOpsWait before it re-reads the word;
/// the wait itself is unbounded, as on a GPU.
const WAIT_PAUSE: std::time::Duration = std::time::Duration::from_micros(50);

impl Blit {
    /// The blit a kernel name denotes (`None`: not a blit kernel, or one
    /// that is not implemented).
    pub fn from_name(name: &str) -> Option<Blit> {
        Some(match name {
            "__amd_rocclr_copyBuffer" => Blit::CopyBuffer,
            "__amd_rocclr_copyBufferAligned" => Blit::CopyBufferAligned,
            "__amd_rocclr_copyBufferRect" => Blit::CopyBufferRect,
            "__amd_rocclr_copyBufferRectAligned" => Blit::CopyBufferRectAligned,
            "__amd_rocclr_fillBufferAligned" => Blit::FillBufferAligned,
            "__amd_rocclr_fillBufferAligned2D" => Blit::FillBufferAligned2D,
            "__amd_rocclr_streamOpsWrite" => Blit::StreamOpsWrite,
            "__amd_rocclr_streamOpsWait" => Blit::StreamOpsWait,
            _ => return None,
        })
    }

    /// (offset, size) of each explicit argument this implementation reads.
    fn layout(self) -> &'static [(u64, u64)] {
        match self {
            Blit::CopyBuffer | Blit::CopyBufferAligned => {
                &[(0, 8), (8, 8), (16, 8), (24, 8), (32, 8), (40, 4)]
            }
            Blit::CopyBufferRect | Blit::CopyBufferRectAligned => {
                &[(0, 8), (8, 8), (32, 32), (64, 32), (96, 32)]
            }
            Blit::FillBufferAligned => &[
                (0, 8),
                (8, 8),
                (16, 8),
                (24, 8),
                (32, 8),
                (40, 4),
                (48, 8),
                (56, 8),
            ],
            Blit::FillBufferAligned2D => &[
                (0, 8),
                (8, 8),
                (16, 8),
                (24, 8),
                (32, 8),
                (40, 4),
                (48, 8),
                (56, 8),
                (64, 8),
                (72, 8),
            ],
            Blit::StreamOpsWrite => &[(0, 8), (8, 8), (16, 8), (24, 8)],
            Blit::StreamOpsWait => &[(0, 8), (8, 8), (16, 8), (24, 8), (32, 8)],
        }
    }

    /// Checks the code object's explicit arguments (offset, size) against
    /// the layout this implementation reads. Err: what differs.
    pub fn check_layout(self, args: &[(u64, u64)]) -> Result<(), String> {
        if args == self.layout() {
            Ok(())
        } else {
            Err(format!(
                "its arguments (offset, size) are {args:?}; the CPU runtime implements {:?}",
                self.layout()
            ))
        }
    }

    /// Runs the blit on `kernarg` (the packet's kernarg segment).
    ///
    /// # Safety
    /// `kernarg` must hold the kernel's explicit arguments, and the
    /// pointers in them must address memory of the sizes the arguments
    /// describe, as on a GPU.
    pub unsafe fn run(self, kernarg: *const u8) -> Result<(), String> {
        if kernarg.is_null() {
            return Err("the packet has no kernarg segment".into());
        }
        // SAFETY: the caller guarantees the layout checked at load.
        let u64_at = |off: usize| unsafe { (kernarg.add(off) as *const u64).read_unaligned() };
        let u32_at = |off: usize| unsafe { (kernarg.add(off) as *const u32).read_unaligned() };
        let ptr_at = |off: usize| u64_at(off) as usize as *mut u8;
        match self {
            Blit::CopyBuffer => {
                let (size, remain) = (u64_at(32), u32_at(40) as u64);
                let bytes = size.saturating_sub(1) * 4 + remain;
                // SAFETY: per the caller's guarantee.
                unsafe { copy(ptr_at(0), u64_at(16), ptr_at(8), u64_at(24), bytes) }
            }
            Blit::CopyBufferAligned => {
                let bytes = u64_at(32)
                    .checked_mul(u32_at(40) as u64)
                    .ok_or("copyBufferAligned: size * alignment overflows")?;
                // SAFETY: per the caller's guarantee.
                unsafe { copy(ptr_at(0), u64_at(16), ptr_at(8), u64_at(24), bytes) }
            }
            Blit::CopyBufferRect | Blit::CopyBufferRectAligned => {
                // (row pitch, slice pitch, start, _) and (row, rows, slices, element bytes).
                let src_rect = [u64_at(32), u64_at(40), u64_at(48)];
                let dst_rect = [u64_at(64), u64_at(72), u64_at(80)];
                let size = [u64_at(96), u64_at(104), u64_at(112)];
                let element = match (self, u64_at(120)) {
                    (Blit::CopyBufferRect, _) => 1,
                    (_, e @ (1 | 2 | 4 | 8 | 16)) => e,
                    (_, e) => return Err(format!("copyBufferRectAligned: element size {e}")),
                };
                for z in 0..size[2] {
                    for y in 0..size[1] {
                        let s = src_rect[2] + y * src_rect[0] + z * src_rect[1];
                        let d = dst_rect[2] + y * dst_rect[0] + z * dst_rect[1];
                        // SAFETY: per the caller's guarantee.
                        unsafe {
                            copy(
                                ptr_at(0),
                                s * element,
                                ptr_at(8),
                                d * element,
                                size[0] * element,
                            )?
                        };
                    }
                }
                Ok(())
            }
            Blit::FillBufferAligned | Blit::FillBufferAligned2D => {
                let (buffer, element) = [(24, 8u64), (16, 4), (8, 2), (0, 1)]
                    .into_iter()
                    .map(|(off, element)| (ptr_at(off), element))
                    .find(|(p, _)| !p.is_null())
                    .ok_or("fillBufferAligned: every buffer pointer is null")?;
                let pattern = ptr_at(32) as *const u8;
                let pattern_elements = u32_at(40) as u64;
                let offset = u64_at(48);
                let (width, height, pitch) = if self == Blit::FillBufferAligned {
                    (u64_at(56), 1, 0)
                } else {
                    (u64_at(56), u64_at(64), u64_at(72))
                };
                if pattern.is_null() && pattern_elements > 0 {
                    return Err("fillBufferAligned: the pattern pointer is null".into());
                }
                let pattern_bytes = (pattern_elements * element) as usize;
                for row in 0..height {
                    let row_start = (offset + row * pitch) * element;
                    for i in 0..width {
                        let at = row_start + i * pattern_bytes as u64;
                        // SAFETY: per the caller's guarantee.
                        unsafe { std::ptr::copy(pattern, buffer.add(at as usize), pattern_bytes) };
                    }
                }
                Ok(())
            }
            Blit::StreamOpsWrite => {
                let value = u64_at(16);
                if u64_at(24) == 8 {
                    let p = ptr_at(8) as *const AtomicU64;
                    if p.is_null() {
                        return Err("streamOpsWrite: ptrUlong is null".into());
                    }
                    // SAFETY: an aligned 8-byte word of device memory.
                    unsafe { (*p).store(value, Ordering::Release) };
                } else {
                    let p = ptr_at(0) as *const AtomicU32;
                    if p.is_null() {
                        return Err("streamOpsWrite: ptrInt is null".into());
                    }
                    // SAFETY: an aligned 4-byte word of device memory.
                    unsafe { (*p).store(value as u32, Ordering::Release) };
                }
                Ok(())
            }
            Blit::StreamOpsWait => {
                let (value, flags, mask) = (u64_at(16), u64_at(24), u64_at(32));
                let wide = ptr_at(8) as *const AtomicU64;
                let narrow = ptr_at(0) as *const AtomicU32;
                if wide.is_null() && narrow.is_null() {
                    return Err("streamOpsWait: both pointers are null".into());
                }
                if flags > 3 {
                    return Err(format!("streamOpsWait: unknown comparison {flags}"));
                }
                loop {
                    // SAFETY: an aligned word of device memory.
                    let word = unsafe {
                        if wide.is_null() {
                            (*narrow).load(Ordering::Acquire) as u64
                        } else {
                            (*wide).load(Ordering::Acquire)
                        }
                    };
                    if wait_satisfied(flags, word & mask, value) {
                        return Ok(());
                    }
                    std::thread::sleep(WAIT_PAUSE);
                }
            }
        }
    }
}

/// hipStreamWaitValue's comparisons on the masked word.
fn wait_satisfied(flags: u64, masked: u64, value: u64) -> bool {
    match flags {
        0 => masked >= value,
        1 => masked == value,
        2 => masked & value != 0,
        _ => !(masked | value) != 0,
    }
}

/// Copies `bytes` from src + src_offset to dst + dst_offset (overlap allowed).
///
/// # Safety
/// Both ranges must be valid for `bytes` bytes.
unsafe fn copy(
    src: *const u8,
    src_offset: u64,
    dst: *mut u8,
    dst_offset: u64,
    bytes: u64,
) -> Result<(), String> {
    if bytes == 0 {
        return Ok(());
    }
    if src.is_null() || dst.is_null() {
        return Err("copy blit with a null buffer".into());
    }
    // SAFETY: per the caller's guarantee.
    unsafe {
        std::ptr::copy(
            src.add(src_offset as usize),
            dst.add(dst_offset as usize),
            bytes as usize,
        )
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernarg(words: &[(usize, u64)], len: usize) -> Vec<u8> {
        let mut k = vec![0u8; len];
        for &(off, v) in words {
            k[off..off + 8].copy_from_slice(&v.to_le_bytes());
        }
        k
    }

    #[test]
    fn copy_buffer_copies_whole_words_then_the_remainder() {
        let src: Vec<u8> = (0..64).collect();
        let mut dst = vec![0xAAu8; 64];
        // 11 bytes from offset 3 to offset 5: size = 11 / 4 + 1 = 3, remain 3.
        let k = kernarg(
            &[
                (0, src.as_ptr() as u64),
                (8, dst.as_mut_ptr() as u64),
                (16, 3),
                (24, 5),
                (32, 3),
                (40, 3),
            ],
            48,
        );
        unsafe { Blit::CopyBuffer.run(k.as_ptr()) }.unwrap();
        assert_eq!(&dst[5..16], &src[3..14]);
        assert_eq!(dst[4], 0xAA);
        assert_eq!(dst[16], 0xAA);
    }

    #[test]
    fn fill_uses_the_one_buffer_set_and_counts_patterns_in_elements() {
        let mut buf = vec![0u32; 16];
        let pattern = [7u32, 9u32];
        // Two-element pattern, offset 2 elements, 3 patterns.
        let k = kernarg(
            &[
                (16, buf.as_mut_ptr() as u64),
                (32, pattern.as_ptr() as u64),
                (40, 2),
                (48, 2),
                (56, 3),
            ],
            64,
        );
        unsafe { Blit::FillBufferAligned.run(k.as_ptr()) }.unwrap();
        assert_eq!(&buf[..10], &[0, 0, 7, 9, 7, 9, 7, 9, 0, 0]);
    }

    #[test]
    fn stream_wait_comparisons() {
        assert!(wait_satisfied(0, 5, 5) && !wait_satisfied(0, 4, 5));
        assert!(wait_satisfied(1, 5, 5) && !wait_satisfied(1, 6, 5));
        assert!(wait_satisfied(2, 0b110, 0b010) && !wait_satisfied(2, 0b100, 0b010));
        assert!(wait_satisfied(3, 0, 0) && !wait_satisfied(3, u64::MAX, 0));
    }

    #[test]
    fn layouts_are_checked_against_the_code_object() {
        let ok = [(0, 8), (8, 8), (16, 8), (24, 8), (32, 8), (40, 4)];
        assert_eq!(Blit::CopyBuffer.check_layout(&ok), Ok(()));
        let err = Blit::CopyBuffer.check_layout(&ok[..5]).unwrap_err();
        assert!(err.contains("implements"), "{err}");
        assert_eq!(Blit::from_name("__amd_rocclr_gwsInit"), None);
    }
}

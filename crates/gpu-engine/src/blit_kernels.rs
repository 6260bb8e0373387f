//! CLR's blit kernels, run natively. The real HIP runtime (libamdhip64)
//! loads its own AMDGPU code object of blit kernels and dispatches them on
//! the application's queue for device-to-device copies, fills and stream
//! memory operations. Their machine code cannot run here, so each kernel
//! the runtime knows by name is implemented below from its argument layout
//! (the code object's `NT_AMDGPU_METADATA`, ROCm 5.2.3's blit code object,
//! checked at load by [`Blit::for_kernel`]) and from what CLR puts in
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
//!
//! CLR 6.4 rewrote three of them (read in CLR 6.4.3's rocclr/device/
//! blitcl.cpp and rocm/rocblit.cpp); each name has one variant per layout,
//! picked by the code object's metadata ([`Blit::for_kernel`]):
//! - `copyBuffer(src@0, dst@8, size@16, remainder:u32@24,
//!   aligned_size:u32@28, end_ptr@32, next_chunk:u32@40)`, CLR 7.2 adding
//!   `workgroup_size:u32@44`: src and dst already hold the origins;
//!   elements of aligned_size (16 or 4) bytes from dst up to end_ptr
//!   (= dst + size - remainder), then the last `remainder` bytes of size.
//! - `fillBufferAligned(buf@0, pattern@8, pattern_size:u32@16,
//!   alignment:u32@20, end_ptr@24, next_chunk:u32@32)`: pattern slots of
//!   pattern_size elements of `alignment` bytes from buf; every slot that
//!   starts before end_ptr gets the pattern. CLR 7.2 adds
//!   `workgroup_size:u32@36` (as to copyBuffer; 7.2.4's source was not at
//!   hand: the layout is its code object's, the meaning checked by
//!   tests/hip/blit_checks.hip on the real HIP 7.2.4).
//! - `streamOpsWrite(ptrInt@0, ptrUlong@8, value@16)`: CLR sets the
//!   pointer of the value's width and leaves the other null.
//!
//! - `__amd_rocclr_gwsInit(value:u32@0)`: sets up the GPU's global wave
//!   sync counter before a cooperative launch (HIP 5.2 always, 6.x where
//!   the ISA has GWS). Does nothing here: a cooperative dispatch's grid
//!   barrier needs no set-up (dispatch.rs).
//!
//! Other kernels of the blit code object (`__amd_rocclr_initHeap`, image
//! kernels) are not implemented: dispatching one fails with a message
//! naming it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A blit kernel CLR names but whose explicit arguments (offset, size) are
/// laid out as none of the variants this runtime implements.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "its arguments (offset, size) are {args:?}; the CPU runtime implements {}",
    implemented_layouts(implemented)
)]
pub struct BlitLayoutError {
    pub args: Vec<(u64, u64)>,
    pub implemented: Vec<&'static [(u64, u64)]>,
}

fn implemented_layouts(layouts: &[&[(u64, u64)]]) -> String {
    let known: Vec<String> = layouts.iter().map(|l| format!("{l:?}")).collect();
    known.join(" or ")
}

/// Why a blit kernel could not run on its packet's arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlitError {
    #[error("the packet has no kernarg segment")]
    NoKernarg,
    #[error("copyBuffer: element size {0}")]
    CopyElementSize(u64),
    #[error("copyBufferAligned: size * alignment overflows")]
    CopySizeOverflows,
    #[error("copyBufferRectAligned: element size {0}")]
    RectElementSize(u64),
    #[error("copy blit with a null buffer")]
    CopyNullBuffer,
    #[error("fillBufferAligned: alignment {0}")]
    FillAlignment(u64),
    #[error("fillBufferAligned: a null buffer or pattern")]
    FillNullBufferOrPattern,
    #[error("fillBufferAligned: every buffer pointer is null")]
    FillEveryBufferNull,
    #[error("fillBufferAligned: the pattern pointer is null")]
    FillNullPattern,
    #[error("streamOpsWrite: both pointers are null")]
    WriteBothNull,
    #[error("streamOpsWrite: ptrUlong is null")]
    WriteNullUlong,
    #[error("streamOpsWrite: ptrInt is null")]
    WriteNullInt,
    #[error("streamOpsWait: both pointers are null")]
    WaitBothNull,
    #[error("streamOpsWait: unknown comparison {0}")]
    WaitComparison(u64),
}

/// A blit kernel this runtime implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blit {
    CopyBuffer,
    /// CLR 6.4's copyBuffer (a grid-stride loop up to `end_ptr`).
    CopyBufferToEnd,
    /// CLR 7.2's: the same with the workgroup size as a last argument.
    CopyBufferToEndSized,
    CopyBufferAligned,
    CopyBufferRect,
    CopyBufferRectAligned,
    FillBufferAligned,
    /// CLR 6.4's fillBufferAligned (one buffer, a grid-stride loop up to
    /// `end_ptr`).
    FillBufferToEnd,
    /// CLR 7.2's: the same with the workgroup size as a last argument.
    FillBufferToEndSized,
    FillBufferAligned2D,
    StreamOpsWrite,
    /// CLR 6.4's streamOpsWrite (no size argument).
    StreamOpsWriteUnsized,
    StreamOpsWait,
    GwsInit,
}

/// Upper bound of one wait of streamOpsWait before it re-reads the word;
/// the wait itself is unbounded, as on a GPU.
const WAIT_PAUSE: std::time::Duration = std::time::Duration::from_micros(50);

impl Blit {
    /// The blits a kernel name denotes, one per CLR generation of its
    /// arguments (empty: not a blit kernel, or one not implemented).
    pub fn variants(name: &str) -> &'static [Blit] {
        match name {
            "__amd_rocclr_copyBuffer" => &[
                Blit::CopyBuffer,
                Blit::CopyBufferToEnd,
                Blit::CopyBufferToEndSized,
            ],
            "__amd_rocclr_copyBufferAligned" => &[Blit::CopyBufferAligned],
            "__amd_rocclr_copyBufferRect" => &[Blit::CopyBufferRect],
            "__amd_rocclr_copyBufferRectAligned" => &[Blit::CopyBufferRectAligned],
            "__amd_rocclr_fillBufferAligned" => &[
                Blit::FillBufferAligned,
                Blit::FillBufferToEnd,
                Blit::FillBufferToEndSized,
            ],
            "__amd_rocclr_fillBufferAligned2D" => &[Blit::FillBufferAligned2D],
            "__amd_rocclr_streamOpsWrite" => &[Blit::StreamOpsWrite, Blit::StreamOpsWriteUnsized],
            "__amd_rocclr_streamOpsWait" => &[Blit::StreamOpsWait],
            "__amd_rocclr_gwsInit" => &[Blit::GwsInit],
            _ => &[],
        }
    }

    /// The blit kernel `name` with explicit arguments `args` (offset,
    /// size) is: the variant whose layout they are. `Ok(None)`: not a blit
    /// this runtime implements; Err: implemented, but for other layouts.
    pub fn for_kernel(name: &str, args: &[(u64, u64)]) -> Result<Option<Blit>, BlitLayoutError> {
        let variants = Blit::variants(name);
        if variants.is_empty() {
            return Ok(None);
        }
        match variants.iter().find(|b| b.layout() == args) {
            Some(b) => Ok(Some(*b)),
            None => Err(BlitLayoutError {
                args: args.to_vec(),
                implemented: variants.iter().map(|b| b.layout()).collect(),
            }),
        }
    }

    /// (offset, size) of each explicit argument this implementation reads.
    fn layout(self) -> &'static [(u64, u64)] {
        match self {
            Blit::CopyBuffer | Blit::CopyBufferAligned => {
                &[(0, 8), (8, 8), (16, 8), (24, 8), (32, 8), (40, 4)]
            }
            Blit::CopyBufferToEnd => &[(0, 8), (8, 8), (16, 8), (24, 4), (28, 4), (32, 8), (40, 4)],
            Blit::CopyBufferToEndSized => &[
                (0, 8),
                (8, 8),
                (16, 8),
                (24, 4),
                (28, 4),
                (32, 8),
                (40, 4),
                (44, 4),
            ],
            Blit::FillBufferToEnd => &[(0, 8), (8, 8), (16, 4), (20, 4), (24, 8), (32, 4)],
            Blit::FillBufferToEndSized => {
                &[(0, 8), (8, 8), (16, 4), (20, 4), (24, 8), (32, 4), (36, 4)]
            }
            Blit::StreamOpsWriteUnsized => &[(0, 8), (8, 8), (16, 8)],
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
            Blit::GwsInit => &[(0, 4)],
        }
    }

    /// Runs the blit on `kernarg` (the packet's kernarg segment).
    ///
    /// # Safety
    /// `kernarg` must hold the kernel's explicit arguments, and the
    /// pointers in them must address memory of the sizes the arguments
    /// describe, as on a GPU.
    pub unsafe fn run(self, kernarg: *const u8) -> Result<(), BlitError> {
        if kernarg.is_null() {
            return Err(BlitError::NoKernarg);
        }
        // SAFETY: the caller guarantees the layout checked at load.
        let u64_at = |off: usize| unsafe { (kernarg.add(off) as *const u64).read_unaligned() };
        // SAFETY: as above.
        let u32_at = |off: usize| unsafe { (kernarg.add(off) as *const u32).read_unaligned() };
        let ptr_at = |off: usize| u64_at(off) as usize as *mut u8;
        match self {
            Blit::CopyBuffer => {
                let (size, remain) = (u64_at(32), u32_at(40) as u64);
                let bytes = size.saturating_sub(1) * 4 + remain;
                // SAFETY: per the caller's guarantee.
                unsafe { copy(ptr_at(0), u64_at(16), ptr_at(8), u64_at(24), bytes) }
            }
            Blit::CopyBufferToEnd | Blit::CopyBufferToEndSized => {
                // Elements of aligned_size bytes from dst up to end_ptr,
                // then work-item 0 the trailing `remainder` bytes of `size`.
                let (src, dst, size) = (ptr_at(0), ptr_at(8), u64_at(16));
                let (remainder, element) = (u32_at(24) as u64, u32_at(28) as u64);
                if element != 16 && element != 4 {
                    return Err(BlitError::CopyElementSize(element));
                }
                let span = u64_at(32).saturating_sub(dst as u64);
                let aligned = span.div_ceil(element) * element;
                // SAFETY: per the caller's guarantee.
                unsafe { copy(src, 0, dst, 0, aligned)? };
                if remainder != 0 {
                    let tail = size.saturating_sub(remainder);
                    // SAFETY: per the caller's guarantee.
                    unsafe { copy(src, tail, dst, tail, size - tail)? };
                }
                Ok(())
            }
            Blit::FillBufferToEnd | Blit::FillBufferToEndSized => {
                // Pattern slots of pattern_size elements of `alignment`
                // bytes from buf on; every slot that starts before end_ptr
                // gets the whole pattern (CLR's next_chunk covers the grid).
                let (buffer, pattern) = (ptr_at(0), ptr_at(8) as *const u8);
                let (elements, alignment) = (u32_at(16) as u64, u32_at(20) as u64);
                if ![1, 2, 4, 8, 16].contains(&alignment) {
                    return Err(BlitError::FillAlignment(alignment));
                }
                let slot = elements * alignment;
                let span = u64_at(24).saturating_sub(buffer as u64);
                if slot == 0 || span == 0 {
                    return Ok(());
                }
                if buffer.is_null() || pattern.is_null() {
                    return Err(BlitError::FillNullBufferOrPattern);
                }
                let mut at = 0;
                while at < span {
                    // SAFETY: per the caller's guarantee.
                    unsafe { std::ptr::copy(pattern, buffer.add(at as usize), slot as usize) };
                    at += slot;
                }
                Ok(())
            }
            Blit::StreamOpsWriteUnsized => {
                // CLR sets the pointer whose width the value has, the other null.
                let (narrow, wide) = (ptr_at(0) as *const AtomicU32, ptr_at(8) as *const AtomicU64);
                let value = u64_at(16);
                if !wide.is_null() {
                    // SAFETY: an aligned 8-byte word of device memory.
                    unsafe { (*wide).store(value, Ordering::Release) };
                } else if !narrow.is_null() {
                    // SAFETY: an aligned 4-byte word of device memory.
                    unsafe { (*narrow).store(value as u32, Ordering::Release) };
                } else {
                    return Err(BlitError::WriteBothNull);
                }
                Ok(())
            }
            Blit::CopyBufferAligned => {
                let bytes = u64_at(32)
                    .checked_mul(u32_at(40) as u64)
                    .ok_or(BlitError::CopySizeOverflows)?;
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
                    (_, e) => return Err(BlitError::RectElementSize(e)),
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
                    .ok_or(BlitError::FillEveryBufferNull)?;
                let pattern = ptr_at(32) as *const u8;
                let pattern_elements = u32_at(40) as u64;
                let offset = u64_at(48);
                let (width, height, pitch) = if self == Blit::FillBufferAligned {
                    (u64_at(56), 1, 0)
                } else {
                    (u64_at(56), u64_at(64), u64_at(72))
                };
                if pattern.is_null() && pattern_elements > 0 {
                    return Err(BlitError::FillNullPattern);
                }
                let pattern_bytes = (pattern_elements * element) as usize;
                if pattern_bytes == 0 {
                    return Ok(());
                }
                // SAFETY: the pattern holds pattern_bytes bytes (caller's guarantee).
                let pattern = unsafe { std::slice::from_raw_parts(pattern, pattern_bytes) };
                let block = repeated(pattern, FILL_BLOCK_BYTES);
                for row in 0..height {
                    let row_start = ((offset + row * pitch) * element) as usize;
                    // SAFETY: per the caller's guarantee.
                    unsafe {
                        fill_repeating(
                            buffer.add(row_start),
                            width as usize * pattern_bytes,
                            &block,
                        )
                    };
                }
                Ok(())
            }
            Blit::StreamOpsWrite => {
                let value = u64_at(16);
                if u64_at(24) == 8 {
                    let p = ptr_at(8) as *const AtomicU64;
                    if p.is_null() {
                        return Err(BlitError::WriteNullUlong);
                    }
                    // SAFETY: an aligned 8-byte word of device memory.
                    unsafe { (*p).store(value, Ordering::Release) };
                } else {
                    let p = ptr_at(0) as *const AtomicU32;
                    if p.is_null() {
                        return Err(BlitError::WriteNullInt);
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
                    return Err(BlitError::WaitBothNull);
                }
                if flags > 3 {
                    return Err(BlitError::WaitComparison(flags));
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
            Blit::GwsInit => Ok(()),
        }
    }
}

/// Bytes a fill copies at a time (a whole number of patterns).
const FILL_BLOCK_BYTES: usize = 64 << 10;

/// `pattern` repeated to the largest whole number of patterns that fits in
/// `limit` bytes (at least one).
fn repeated(pattern: &[u8], limit: usize) -> Vec<u8> {
    let count = (limit / pattern.len()).max(1);
    pattern.repeat(count)
}

/// Writes `len` bytes at `dst`: `block` (whole patterns) again and again,
/// the last copy cut short.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes.
unsafe fn fill_repeating(dst: *mut u8, len: usize, block: &[u8]) {
    let mut done = 0;
    while done < len {
        let n = block.len().min(len - done);
        // SAFETY: per the function contract; block holds at least n bytes.
        unsafe { std::ptr::copy_nonoverlapping(block.as_ptr(), dst.add(done), n) };
        done += n;
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
) -> Result<(), BlitError> {
    if bytes == 0 {
        return Ok(());
    }
    if src.is_null() || dst.is_null() {
        return Err(BlitError::CopyNullBuffer);
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
        // SAFETY: the kernarg holds the layout this blit reads, its buffers live.
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
        // SAFETY: the kernarg holds the layout this blit reads, its buffers live.
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
    fn the_variant_is_picked_by_the_code_object_s_layout() {
        let name = "__amd_rocclr_copyBuffer";
        let clr52 = [(0, 8), (8, 8), (16, 8), (24, 8), (32, 8), (40, 4)];
        assert_eq!(Blit::for_kernel(name, &clr52), Ok(Some(Blit::CopyBuffer)));
        let clr64 = [(0, 8), (8, 8), (16, 8), (24, 4), (28, 4), (32, 8), (40, 4)];
        assert_eq!(
            Blit::for_kernel(name, &clr64),
            Ok(Some(Blit::CopyBufferToEnd))
        );
        let mut clr72 = clr64.to_vec();
        clr72.push((44, 4));
        assert_eq!(
            Blit::for_kernel(name, &clr72),
            Ok(Some(Blit::CopyBufferToEndSized))
        );
        let err = Blit::for_kernel(name, &clr52[..5]).unwrap_err().to_string();
        assert!(err.contains("implements") && err.contains(" or "), "{err}");
        assert_eq!(
            Blit::for_kernel("__amd_rocclr_gwsInit", &[(0, 4)]),
            Ok(Some(Blit::GwsInit))
        );
        assert_eq!(
            Blit::for_kernel("__amd_rocclr_initHeap", &[(0, 8)]),
            Ok(None)
        );
    }

    #[test]
    fn clr_6_4_copy_buffer_copies_aligned_elements_to_the_end_then_the_tail() {
        let src: Vec<u8> = (0..64).collect();
        let mut dst = vec![0xAAu8; 64];
        // 37 bytes, 16-byte elements: remainder 5, end_ptr = dst + 32.
        let d = dst.as_mut_ptr() as u64;
        let mut k = kernarg(
            &[(0, src.as_ptr() as u64), (8, d), (16, 37), (32, d + 32)],
            48,
        );
        k[24..28].copy_from_slice(&5u32.to_le_bytes());
        k[28..32].copy_from_slice(&16u32.to_le_bytes());
        // SAFETY: the kernarg holds the layout this blit reads, its buffers live.
        unsafe { Blit::CopyBufferToEnd.run(k.as_ptr()) }.unwrap();
        assert_eq!(&dst[..37], &src[..37]);
        assert!(dst[37..].iter().all(|b| *b == 0xAA));
    }

    #[test]
    fn clr_6_4_fill_writes_every_pattern_slot_before_the_end() {
        let mut buf = vec![0u32; 16];
        let pattern = [7u32, 9u32];
        // Two 4-byte elements per pattern, slots up to element 10.
        let b = buf.as_mut_ptr() as u64;
        let mut k = kernarg(&[(0, b), (8, pattern.as_ptr() as u64), (24, b + 40)], 40);
        k[16..20].copy_from_slice(&2u32.to_le_bytes());
        k[20..24].copy_from_slice(&4u32.to_le_bytes());
        // SAFETY: the kernarg holds the layout this blit reads, its buffers live.
        unsafe { Blit::FillBufferToEnd.run(k.as_ptr()) }.unwrap();
        assert_eq!(&buf[..12], &[7, 9, 7, 9, 7, 9, 7, 9, 7, 9, 0, 0]);
    }
}

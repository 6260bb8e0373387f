//! Memory for a tensor's bytes on their way into or out of a tensor
//! file: [`zeroed_buffer`], a zeroed buffer taken from the allocator (huge
//! pages asked for a large one), or `None` where it cannot be had. Owns no
//! file and no layout; never aborts the process on a failed allocation.

/// A zeroed buffer of `len` bytes; `None` when it cannot be allocated.
/// Taken zeroed from the allocator (for a large one, fresh pages the
/// kernel zeroes as they are first touched: no second pass writing zeros),
/// and a large one asks for transparent huge pages (the kernel's `madvise`
/// mode) before any page is touched: zeroing 1 GiB through 4 KiB page
/// faults took a second on a VM, more than reading it from the page cache.
/// Used for every buffer the collector copies into and every small tensor
/// read back.
pub fn zeroed_buffer(len: usize) -> Option<Vec<u8>> {
    const HUGE_PAGE: usize = 2 << 20;
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(len).ok()?;
    // SAFETY: a layout of non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return None;
    }
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + len) & !(HUGE_PAGE - 1);
    if end > start {
        // SAFETY: advice on whole pages inside this allocation; it changes
        // no contents (a refusal only leaves small pages).
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    // SAFETY: allocated by the global allocator with the layout of a
    // `Vec<u8>` of capacity `len`, and all `len` bytes are initialised (zero).
    Some(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

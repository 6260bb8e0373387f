//! What a GPU's writes are visible to, by the scopes of the packets that
//! made them. On an Instinct GPU a kernel's stores sit in the GPU's L2
//! until a release at SYSTEM scope writes it back: a dispatch released at
//! AGENT scope (what HIP gives every kernel) is visible to later kernels
//! and blit kernels of the same GPU, and not to the SDMA copy engines
//! (`hsa_amd_memory_async_copy`), the host or another GPU, which read the
//! memory as it was, until a later packet on the GPU completes with a
//! SYSTEM-scope release (HIP's barrier before the host reads).
//!
//! The model: before a dispatch whose release scope is not SYSTEM runs,
//! every GPU allocation its kernel arguments point at is copied into the
//! shadow region of its memfd (`allocations`' layout; in-kernel, with
//! copy_file_range) and flagged stale in the memfd's metadata page, unless
//! it is stale already: the shadow then holds the bytes as the copy
//! engines still see them. The kernel writes the memory itself, which
//! kernels and blit copies read. A SYSTEM-scope release on the same GPU
//! clears every flag it set (and frees the shadow pages). Copy engines
//! read a stale allocation's shadow (`copy_engines`), in any process, since
//! flag and shadow live in the memfd; each such read is a trace event
//! (`stale-read`).
//!
//! Where it is kinder than the hardware: only allocations that a kernel
//! argument points at (an aligned 8-byte word of the kernarg segment
//! holding an address inside one) are tracked, so writes through pointers
//! held in memory are visible at once; a CPU load on a large-BAR system,
//! and a peer GPU's kernel, see the written bytes.
//!
//! Over `allocations` (the memfd layout, the allocation lookup) and
//! `device_access` (the command processor reads kernel arguments anywhere).

use crate::memory::allocations;
use crate::memory::device_access::DeviceAccess;
use crate::memory::pool_memfd::Region;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

/// An allocation flagged stale by this process, until its GPU's next
/// SYSTEM-scope release.
struct Stale {
    /// A duplicate of the memfd's descriptor (the allocation may be freed,
    /// and its memfd closed by `allocations`, before the release).
    fd: i32,
    region: Region,
}

/// GPU index → the allocations its agent-scope dispatches left stale.
static STALE: LazyLock<Mutex<HashMap<usize, Vec<Stale>>>> = LazyLock::new(Default::default);

/// Entries in `STALE`, kept beside it so that the SYSTEM-scope release of
/// every packet (most packets) costs one load while nothing is stale.
static STALE_COUNT: AtomicUsize = AtomicUsize::new(0);

fn stale() -> std::sync::MutexGuard<'static, HashMap<usize, Vec<Stale>>> {
    STALE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Before a dispatch on GPU `gpu` whose release scope is not SYSTEM: the
/// GPU allocations its `kernarg_len` bytes of arguments point at keep
/// their present bytes for the copy engines.
///
/// # Safety
/// `kernarg` is readable for `kernarg_len` bytes (or null).
pub(crate) unsafe fn before_agent_scope_dispatch(
    gpu: usize,
    kernarg: *const u8,
    kernarg_len: usize,
) {
    if kernarg.is_null() || kernarg_len < 8 {
        return;
    }
    // The command processor reads the kernarg segment wherever it lies,
    // device memory included.
    let _engine = DeviceAccess::enter();
    let words = (0..kernarg_len / 8).map(|i| {
        // SAFETY: inside the kernarg segment (the caller's promise).
        unsafe { (kernarg.add(i * 8) as *const u64).read_unaligned() as usize }
    });
    let regions = allocations::device_regions(words.filter(|w| *w >= 4096));
    if regions.is_empty() {
        return;
    }
    let mut all = stale();
    let list = all.entry(gpu).or_default();
    for region in regions {
        if region.is_stale() {
            continue;
        }
        // SAFETY: dup of a live memfd descriptor that `allocations` owns.
        let fd = unsafe { libc::fcntl(region.fd, libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            continue;
        }
        if region.keep_present_bytes(fd).is_ok() {
            list.push(Stale { fd, region });
            STALE_COUNT.fetch_add(1, Ordering::Release);
        } else {
            // SAFETY: the duplicate made above.
            unsafe { libc::close(fd) };
        }
    }
}

/// A packet on GPU `gpu` completed with a SYSTEM-scope release: every
/// write of the GPU is visible everywhere.
pub(crate) fn system_release(gpu: usize) {
    if STALE_COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let released = match stale().get_mut(&gpu) {
        Some(list) if !list.is_empty() => {
            STALE_COUNT.fetch_sub(list.len(), Ordering::Release);
            std::mem::take(list)
        }
        _ => return,
    };
    for s in released {
        s.region.made_visible(s.fd);
        // SAFETY: our duplicate, closed once.
        unsafe { libc::close(s.fd) };
    }
}

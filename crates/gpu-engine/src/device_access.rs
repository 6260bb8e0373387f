//! Device memory as a discrete GPU's: owns the rule of who may touch a GPU
//! pool's coarse-grained memory. On an Instinct GPU that memory is VRAM,
//! mapped for the CPU only on large-BAR systems (the thunk maps it
//! PROT_NONE otherwise), so a CPU load faults and a system call given such
//! an address fails with EFAULT; and another GPU reaches it only once
//! `hsa_amd_agents_allow_access` has mapped it for that GPU. The runtime
//! models both with memory protection keys (pkey_alloc/pkey_mprotect): the
//! memory of GPU i carries GPU i's key, and memory opened to other GPUs
//! (allow access, an IPC attachment or a vmem mapping for several GPUs)
//! the peers' key. Every thread denies every key by default (Linux starts
//! each thread with all keys but 0 access-disabled); the mappings carry
//! their key in every process that maps them. A kernel of GPU i opens GPU
//! i's key and the peers' for its run ([`DeviceAccess::for_gpu`]), the
//! copy engines and the command processor every key
//! ([`DeviceAccess::enter`]); nothing else opens any, so the application's,
//! a tool's and a collector's threads fault (SEGV_PKUERR) as on the
//! hardware, and so does a kernel reaching another GPU's memory that was
//! never opened to it (where a GPU raises a memory-access fault).
//!
//! `DITTO_HSA_CPU_LARGE_BAR=1` models a large-BAR system: GPU memory is
//! host-accessible (and open between GPUs), and the CPU agent's ACCESS to
//! a GPU pool says so (DISALLOWED_BY_DEFAULT, as ROCr reports for a GPU the
//! CPU has a link to; NEVER_ALLOWED otherwise). Where protection keys are
//! missing (no `pku`/`ospke`, another architecture), the pools still say
//! NEVER_ALLOWED, the runtime says once that accesses are not caught, and
//! [`protection`] tells tests why.
//!
//! Uses no other module of the crate.

use hsa::{
    HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT, HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED,
    hsa_amd_memory_pool_access_t,
};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

/// Environment variable: GPU memory is host-accessible (large BAR).
pub const LARGE_BAR_ENV: &str = "DITTO_HSA_CPU_LARGE_BAR";

/// How this process keeps CPU threads out of GPU memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protection {
    /// GPU memory carries protection keys (GPU 0's is allocated first).
    Keys,
    /// DITTO_HSA_CPU_LARGE_BAR: GPU memory is host-accessible.
    LargeBar,
    /// No protection keys here: CPU accesses are not caught (the reason).
    Unavailable(String),
}

/// Whether DITTO_HSA_CPU_LARGE_BAR asks for host-accessible GPU memory.
pub fn large_bar() -> bool {
    static LARGE: OnceLock<bool> = OnceLock::new();
    *LARGE.get_or_init(|| {
        std::env::var(LARGE_BAR_ENV)
            .map(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"))
            .unwrap_or(false)
    })
}

/// Key slots: one per GPU, then the peers'.
const PEER_SLOT: usize = 8;
const SLOTS: usize = PEER_SLOT + 1;

/// The key of each slot, -1 until allocated (on the first memory of that
/// GPU, or the first opened to peers).
static KEYS: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];

/// The process's protection, decided once (GPU 0's key allocated then).
pub fn protection() -> &'static Protection {
    static PROTECTION: OnceLock<Protection> = OnceLock::new();
    PROTECTION.get_or_init(|| {
        if large_bar() {
            return Protection::LargeBar;
        }
        match allocate_key() {
            Ok(key) => {
                KEYS[0].store(key, Ordering::Release);
                Protection::Keys
            }
            Err(why) => {
                eprintln!(
                    "ditto GPU engine: GPU memory is not protected from CPU threads ({why}): a CPU \
                     access to it is not caught here as it would be on a discrete GPU"
                );
                Protection::Unavailable(why)
            }
        }
    })
}

/// Who may reach a range of GPU memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// GPU `i` alone.
    Gpu(usize),
    /// Every GPU (opened to peers).
    Peers,
}

/// The key of `reach`, allocated on first use. None without keys; when no
/// key is left, GPU 0's (GPUs then reach each other's memory).
fn key_of(reach: Reach) -> Option<i32> {
    if *protection() != Protection::Keys {
        return None;
    }
    let slot = match reach {
        Reach::Gpu(i) => i.min(PEER_SLOT - 1),
        Reach::Peers => PEER_SLOT,
    };
    let key = KEYS[slot].load(Ordering::Acquire);
    if key >= 0 {
        return Some(key);
    }
    static ALLOCATING: Mutex<()> = Mutex::new(());
    let _one = ALLOCATING.lock().unwrap_or_else(|e| e.into_inner());
    let key = KEYS[slot].load(Ordering::Acquire);
    if key >= 0 {
        return Some(key);
    }
    let key = match allocate_key() {
        Ok(k) => k,
        Err(why) => {
            eprintln!(
                "ditto GPU engine: no protection key left for {reach:?} ({why}): it shares GPU 0's"
            );
            KEYS[0].load(Ordering::Acquire)
        }
    };
    KEYS[slot].store(key, Ordering::Release);
    Some(key)
}

/// The PKRU bits that deny the keys allocated so far for `slots`.
fn denied_bits(slots: impl Iterator<Item = usize>) -> u32 {
    slots
        .map(|s| KEYS[s].load(Ordering::Acquire))
        .filter(|k| *k >= 0)
        .fold(0, |bits, k| bits | (0b11 << (2 * k)))
}

/// What HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS tells the CPU agent of a
/// GPU's coarse-grained pool.
pub fn cpu_access() -> hsa_amd_memory_pool_access_t {
    if large_bar() {
        HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT
    } else {
        HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED
    }
}

/// Marks `[base, base+len)`, a read-write mapping of GPU memory, as
/// reachable by `reach` only: CPU threads, and other GPUs' kernels, fault
/// on it. Does nothing on a large-BAR system or without protection keys.
/// `Err` names the failed call.
///
/// # Safety
/// `[base, base + len)` is a read-write mapping of GPU memory the caller
/// owns (its protection key changes; its protection stays read-write).
pub unsafe fn protect(base: usize, len: usize, reach: Reach) -> Result<(), ProtectError> {
    let Some(key) = key_of(reach) else {
        return Ok(());
    };
    // SAFETY: pkey_mprotect on a mapping the caller owns, read-write as it
    // was mapped; only the key changes.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pkey_mprotect,
            base,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            key,
        )
    };
    if rc != 0 {
        return Err(ProtectError {
            len,
            base,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// A range of GPU memory whose protection key could not be set.
#[derive(Debug, thiserror::Error)]
#[error("pkey_mprotect of {len} bytes at 0x{base:x}: {source}")]
pub struct ProtectError {
    pub len: usize,
    pub base: usize,
    pub source: std::io::Error,
}

/// The runtime's own access to GPU memory, for the duration of a kernel
/// or a copy on this thread (a GPU's engines reach their memory; the CPU's
/// threads do not). Restores the thread's previous rights when dropped, so
/// a callback the runtime makes afterwards runs without them.
#[must_use]
pub struct DeviceAccess {
    saved: Option<u32>,
}

impl DeviceAccess {
    /// Every GPU's memory, until the guard drops: a copy engine, the
    /// command processor.
    #[inline]
    pub fn enter() -> DeviceAccess {
        Self::open(|| denied_bits(0..SLOTS))
    }

    /// What a kernel of GPU `gpu` reaches: its own memory and memory opened
    /// to peers.
    #[inline]
    pub fn for_gpu(gpu: usize) -> DeviceAccess {
        Self::open(|| denied_bits([gpu.min(PEER_SLOT - 1), PEER_SLOT].into_iter()))
    }

    #[inline]
    fn open(bits: impl FnOnce() -> u32) -> DeviceAccess {
        if *protection() != Protection::Keys {
            return DeviceAccess { saved: None };
        }
        let saved = pkru::read();
        let open = saved & !bits();
        if open == saved {
            return DeviceAccess { saved: None };
        }
        pkru::write(open);
        DeviceAccess { saved: Some(saved) }
    }
}

impl Drop for DeviceAccess {
    #[inline]
    fn drop(&mut self) {
        if let Some(saved) = self.saved {
            pkru::write(saved);
        }
    }
}

/// Whether this thread may touch every GPU's memory now (tests).
pub fn open_on_this_thread() -> bool {
    *protection() != Protection::Keys || pkru::read() & denied_bits(0..SLOTS) == 0
}

fn allocate_key() -> Result<i32, String> {
    if !cfg!(target_arch = "x86_64") {
        return Err("memory protection keys are used on x86_64 only".into());
    }
    // PKEY_DISABLE_ACCESS for the calling thread; every other thread starts
    // with the key access-disabled already (Linux's default PKRU).
    // SAFETY: pkey_alloc takes two integers and returns a key or -1.
    let key = unsafe { libc::syscall(libc::SYS_pkey_alloc, 0, 1) };
    if key < 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!(
            "pkey_alloc failed: {e}; the CPUs need the `pku` and `ospke` flags \
             (grep -w -E 'pku|ospke' /proc/cpuinfo)"
        ));
    }
    Ok(key as i32)
}

#[cfg(target_arch = "x86_64")]
mod pkru {
    /// This thread's PKRU register.
    #[inline]
    pub fn read() -> u32 {
        let value: u32;
        // SAFETY: RDPKRU is valid once the kernel enabled protection keys
        // (callers hold a key, which pkey_alloc gives only then).
        unsafe {
            std::arch::asm!("rdpkru", in("ecx") 0u32, out("eax") value, out("edx") _,
                options(nomem, nostack, preserves_flags));
        }
        value
    }

    /// Sets this thread's PKRU register.
    #[inline]
    pub fn write(value: u32) {
        // SAFETY: as `read`; WRPKRU changes only this thread's access rights
        // (so it is not `nomem`: later accesses depend on it).
        unsafe {
            std::arch::asm!("wrpkru", in("eax") value, in("ecx") 0u32, in("edx") 0u32,
                options(nostack, preserves_flags));
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod pkru {
    pub fn read() -> u32 {
        0
    }
    pub fn write(_value: u32) {}
}

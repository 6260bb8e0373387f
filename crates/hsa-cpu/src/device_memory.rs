//! Device memory as a discrete GPU's: owns the rule of who may touch a GPU
//! pool's coarse-grained memory with a CPU instruction. On an Instinct GPU
//! that memory is VRAM, mapped for the CPU only on large-BAR systems (the
//! thunk maps it PROT_NONE otherwise), so a CPU load faults and a system
//! call given such an address fails with EFAULT. The runtime models it with
//! a memory protection key (pkey_alloc/pkey_mprotect): every GPU-pool
//! mapping, in the allocating process and in every process that attaches
//! it over IPC, carries the key, which every thread denies by default
//! (Linux starts each thread with all keys but 0 access-disabled). The
//! runtime's kernels and copy engines open it for the duration of their
//! work ([`DeviceAccess`]); nothing else does, so the application's, a
//! tool's and a collector's threads fault (SEGV_PKUERR) as on the hardware.
//!
//! `DITTO_HSA_CPU_LARGE_BAR=1` models a large-BAR system: GPU memory is
//! host-accessible, and the CPU agent's ACCESS to a GPU pool says so
//! (DISALLOWED_BY_DEFAULT, as ROCr reports for a GPU the CPU has a link to;
//! NEVER_ALLOWED otherwise). Where protection keys are missing (no `pku`/
//! `ospke`, another architecture), the pools still say NEVER_ALLOWED, the
//! runtime says once that CPU accesses are not caught, and
//! [`protection`] tells tests why.
//!
//! Uses no other module of the crate.

use hsa::{
    HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT, HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED,
    hsa_amd_memory_pool_access_t,
};
use std::sync::OnceLock;

/// Environment variable: GPU memory is host-accessible (large BAR).
pub const LARGE_BAR_ENV: &str = "DITTO_HSA_CPU_LARGE_BAR";

/// How this process keeps CPU threads out of GPU memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protection {
    /// Every GPU-pool mapping carries this protection key.
    Key(i32),
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

/// The process's protection, decided once (the key allocated then).
pub fn protection() -> &'static Protection {
    static PROTECTION: OnceLock<Protection> = OnceLock::new();
    PROTECTION.get_or_init(|| {
        if large_bar() {
            return Protection::LargeBar;
        }
        match allocate_key() {
            Ok(key) => Protection::Key(key),
            Err(why) => {
                eprintln!(
                    "hsa-cpu: GPU memory is not protected from CPU threads ({why}): a CPU \
                     access to it is not caught here as it would be on a discrete GPU"
                );
                Protection::Unavailable(why)
            }
        }
    })
}

fn key() -> Option<i32> {
    match protection() {
        Protection::Key(k) => Some(*k),
        _ => None,
    }
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

/// Marks `[base, base+len)`, a fresh read-write mapping of GPU memory, as
/// device memory: CPU threads outside [`DeviceAccess`] fault on it. Does
/// nothing on a large-BAR system or without protection keys. `Err` names
/// the failed call.
pub fn protect(base: usize, len: usize) -> Result<(), String> {
    let Some(key) = key() else {
        return Ok(());
    };
    // SAFETY: pkey_mprotect on a mapping the caller owns, with the same
    // access it was mapped with; only the key changes.
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
        return Err(format!(
            "pkey_mprotect of {len} bytes at 0x{base:x}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
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
    /// Opens GPU memory to this thread until the guard drops.
    #[inline]
    pub fn enter() -> DeviceAccess {
        let Some(key) = key() else {
            return DeviceAccess { saved: None };
        };
        let saved = pkru::read();
        let open = saved & !(0b11 << (2 * key));
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

/// Whether this thread may touch GPU memory now (tests and assertions).
pub fn open_on_this_thread() -> bool {
    match key() {
        Some(key) => pkru::read() & (0b11 << (2 * key)) == 0,
        None => true,
    }
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

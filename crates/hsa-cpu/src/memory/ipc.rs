//! IPC memory: exports pool allocations as 32-byte handles and maps handles
//! from any process. Owns the registry of attachments (mapped pointer → exact
//! mapping). Maps afresh on every attach (no cache, as ROCr) and unmaps
//! exactly that mapping on detach; never maps anything but our own memfds,
//! so nothing is ever left in /dev/shm or any file system: a memfd lives as
//! long as a process holds its fd or a mapping of it, and the kernel drops
//! both when a process dies (SIGKILL included).
//!
//! Handle layout (`hsa_amd_ipc_memory_t.handle[0..8]`, u32 words):
//!   \[0\] owner pid   \[1\] memfd number in the owner (bits 0..24) and the
//!   owning agent (bits 24..32: 0 the CPU agent, 1 + i GPU agent i)
//!   [2..4] memfd inode (lo, hi)
//!   \[4\] page index of the allocation in the memfd   \[5\] allocation serial
//!   [6..8] allocation size in bytes (lo, hi)
//! An attachment of a GPU's memory carries the protection key
//! (`device_access`): this process's CPU threads cannot touch it either.
//! An attachment reports the exporter's owning agent in pointer info, as
//! ROCr reports the node the memory lives on; the attaching process's
//! agent list only has to name agents it has (else INVALID_AGENT).
//! Attach checks, in the owner's live memfd (through `/proc/<pid>/fd`): name,
//! inode (an fd number closed and reused for another file is refused), size,
//! and the serial recorded in the memfd's metadata page (`allocations`): a freed
//! allocation, also a fragment whose 2 MiB block lives on, is refused. An
//! exporter that exited has no /proc entry: refused. Every refusal is
//! HSA_STATUS_ERROR_INVALID_ARGUMENT and leaves `*mapped` untouched.
//!
//! Fault injection (for ditto's own tests; include/ditto_hsa_cpu.h):
//! `DITTO_HSA_CPU_FAULT=stale-ipc-attach`, read once per process, makes
//! attach serve a STALE mapping, the seeds' failure (an old import served for
//! a new buffer). The process remembers the export of its most recent
//! successful attach (keeping that memfd open, so it outlives its exporter).
//! An attach of a DIFFERENT handle with the SAME length is checked exactly as
//! usual (and fails as usual), then returns a fresh mapping of the remembered
//! export instead of the requested one; the requested export becomes the
//! remembered one. The first attach of a process, an attach of the same
//! handle again and an attach of another length are served correctly.
//! Deterministic: exports A, B, C of one length attached in that order
//! give A's, A's and B's bytes. Detach unmaps a stale mapping like any other.
//! Each stale mapping served prints one line on stderr (`hsa-cpu: fault
//! injection: served a stale mapping ...`), so tests can count them.

use crate::agents;
use crate::memory::allocations;
use crate::memory::device_access;
use crate::memory::pool_memfd::{self, MEMFD_NAME, PAGE, Region};
use crate::tools::served_abi::Abi;
use hsa::*;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpcHandle {
    pub pid: u32,
    /// Below `MAX_EXPORT_FD`.
    pub fd: u32,
    /// 0 the CPU agent, 1 + i GPU agent i.
    pub owner: u8,
    pub inode: u64,
    /// Offset of the allocation in the memfd (page aligned).
    pub offset: u64,
    pub serial: u32,
    pub size: u64,
}

impl IpcHandle {
    pub fn encode(&self) -> hsa_amd_ipc_memory_t {
        let lo = |v: u64| v as u32;
        let hi = |v: u64| (v >> 32) as u32;
        hsa_amd_ipc_memory_t {
            handle: [
                self.pid,
                self.fd | (self.owner as u32) << 24,
                lo(self.inode),
                hi(self.inode),
                (self.offset / PAGE as u64) as u32,
                self.serial,
                lo(self.size),
                hi(self.size),
            ],
        }
    }

    pub fn decode(h: &hsa_amd_ipc_memory_t) -> Self {
        let w = |i: usize| h.handle[i] as u64 | (h.handle[i + 1] as u64) << 32;
        IpcHandle {
            pid: h.handle[0],
            fd: h.handle[1] & (MAX_EXPORT_FD - 1),
            owner: (h.handle[1] >> 24) as u8,
            inode: w(2),
            offset: h.handle[4] as u64 * PAGE as u64,
            serial: h.handle[5],
            size: w(6),
        }
    }
}

/// Memfd numbers an export can name (the handle keeps 24 bits of it).
pub const MAX_EXPORT_FD: u32 = 1 << 24;

impl IpcHandle {
    /// The owning agent, as this process knows it: an owner GPU this
    /// process does not have (fewer DITTO_HSA_CPU_GPUS) is reported as GPU 0.
    fn owner_agent(&self) -> hsa_agent_t {
        match self.owner {
            0 => agents::CPU_AGENT,
            n if (n as usize) <= agents::gpu_count() => agents::gpu_agent(n as usize - 1),
            _ => agents::GPU_AGENT,
        }
    }
}

/// The handle's owner byte for an allocation of `pool`.
fn owner_byte(pool: hsa_amd_memory_pool_t) -> u8 {
    agents::pool_info(pool)
        .and_then(|(owner, _)| agents::gpu_index(owner))
        .map_or(0, |i| 1 + i as u8)
}

struct Attachment {
    map_base: usize,
    map_len: usize,
    size: usize,
    owner: hsa_agent_t,
    /// A duplicate of the exporter's memfd, closed on detach, and where
    /// the allocation lies in it: the copy engines read its visibility.
    fd: i32,
    data_len: u64,
    offset: u64,
}

/// The attachment containing `ptr`, as a [`Region`] (for the copy
/// engines), when it is a GPU's memory.
pub(crate) fn attachment_region(ptr: usize) -> Option<Region> {
    let map = ATTACHMENTS.lock().unwrap_or_else(|e| e.into_inner());
    let (user, a) = map.range(..=ptr).next_back()?;
    (ptr < user + a.size.max(1) && agents::is_gpu(a.owner)).then_some(Region {
        fd: a.fd,
        data_len: a.data_len,
        offset: a.offset,
        size: a.size as u64,
        base: *user,
    })
}

/// Mapped pointer → its mapping.
static ATTACHMENTS: LazyLock<Mutex<BTreeMap<usize, Attachment>>> = LazyLock::new(Default::default);

/// The attachment containing `ptr`, as pointer info describes it.
pub(crate) fn attachment_described(ptr: usize) -> Option<allocations::Described> {
    let map = ATTACHMENTS.lock().unwrap_or_else(|e| e.into_inner());
    let (p, a) = map.range(..=ptr).next_back()?;
    (ptr < p + a.size.max(1)).then_some(allocations::Described {
        type_: HSA_EXT_POINTER_TYPE_IPC,
        base: *p,
        size: a.size,
        owner: a.owner,
        flags: 0,
    })
}

/// Number of live attachments in this process.
pub fn attachment_count() -> usize {
    ATTACHMENTS.lock().unwrap_or_else(|e| e.into_inner()).len()
}

/// Whether the served release exports an allocation of `size` bytes (as
/// the caller asked for it) given `len`. Only the allocation's base is ever
/// exportable (checked before). Read in each release's
/// `Runtime::IPCCreate` (runtime.cpp):
/// - 5.2.3 compares `len` with the size it recorded, which is the size
///   rounded up to the allocation granule (and HIP 5.2 passes that);
/// - 5.5.0 to 6.4.3 record the size asked for and accept it or it rounded
///   up to 4 KiB (cb71e2d, "Allow page-aligned len for ipc_memory_create",
///   for HIPs that passed the rounded size);
/// - 7.0 and later accept the size asked for only (d52f1d0 removed the
///   rounded one; HIP passes the size asked for since CLR 5.7).
pub(crate) fn ipc_length_accepted(abi: Abi, len: usize, size: usize) -> bool {
    let page_rounded = size.div_ceil(4096) * 4096;
    match abi {
        Abi::Rocm5_2 => len == allocations::recorded_size(abi, size),
        Abi::Rocm5_5 | Abi::Rocm5_6 | Abi::Rocm6_4 => len == size || len == page_rounded,
        Abi::Rocm7_2 | Abi::Rocm10 | Abi::NextMajor => len == size,
    }
}

/// # Safety
/// `handle` is null or valid for writes of one IPC handle.
pub(crate) unsafe fn memory_create(
    ptr: *mut c_void,
    len: usize,
    handle: *mut hsa_amd_ipc_memory_t,
) -> hsa_status_t {
    if ptr.is_null() || handle.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let Some((c, info)) = allocations::export_info(ptr) else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    if !ipc_length_accepted(crate::tools::served_abi::layout_abi(), len, c.size) {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if info.fd < 0 || info.fd as u32 >= MAX_EXPORT_FD {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    let h = IpcHandle {
        pid: std::process::id(),
        fd: info.fd as u32,
        owner: owner_byte(c.pool),
        inode: info.inode,
        offset: info.offset,
        serial: info.serial,
        size: info.size,
    };
    // SAFETY: handle is a non-null out pointer supplied by the caller.
    unsafe { handle.write(h.encode()) };
    crate::tools::trace::event("ipc-create");
    HSA_STATUS_SUCCESS
}

/// An open memfd, closed on drop.
struct Fd(i32);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// An exporter's memfd, opened, and the length of its data.
struct OwnerMemfd {
    fd: Fd,
    data_len: u64,
}

/// Opens the owner's memfd through /proc and checks that it still holds
/// the live allocation the handle names.
fn open_owner_memfd(h: &IpcHandle) -> Result<OwnerMemfd, hsa_status_t> {
    if h.pid == 0 || h.size == 0 || h.serial == 0 {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    let path = format!("/proc/{}/fd/{}", h.pid, h.fd);
    let target = std::fs::read_link(&path).map_err(|_| HSA_STATUS_ERROR_INVALID_ARGUMENT)?;
    if !target
        .to_string_lossy()
        .contains(&format!("memfd:{MEMFD_NAME}"))
    {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    let cpath = std::ffi::CString::new(path).map_err(|_| HSA_STATUS_ERROR_INVALID_ARGUMENT)?;
    // SAFETY: open/fstat/pread on a path and a descriptor we own.
    unsafe {
        let fd = libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
        }
        let fd = Fd(fd);
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.0, &mut st) != 0 || st.st_ino != h.inode {
            return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
        }
        let data_len = pool_memfd::data_len_of(st.st_size as u64);
        if data_len < h.offset + h.size {
            return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
        }
        let mut serial = [0u8; 4];
        let at = data_len + (h.offset / PAGE as u64) * 4;
        let n = libc::pread(
            fd.0,
            serial.as_mut_ptr() as *mut c_void,
            4,
            at as libc::off_t,
        );
        if n != 4 || u32::from_le_bytes(serial) != h.serial {
            return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
        }
        Ok(OwnerMemfd { fd, data_len })
    }
}

/// Maps `len` bytes of the allocation at `offset` in `memfd`; registers it.
fn map_attachment(
    memfd: &OwnerMemfd,
    offset: u64,
    len: usize,
    owner: hsa_agent_t,
    mapping_agents: &[hsa_agent_t],
) -> Result<usize, hsa_status_t> {
    let page_offset = offset as usize % PAGE;
    let map_start = offset as usize - page_offset;
    let map_len = (page_offset + len).div_ceil(PAGE) * PAGE;
    // SAFETY: mapping a range of a memfd checked to be large enough.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            memfd.fd.0,
            map_start as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    // A GPU's memory is as unreachable by this process's CPU threads as by
    // the exporter's; mapped for GPUs besides its owner, they reach it.
    if let Some(gpu) = agents::gpu_index(owner)
        // SAFETY: the read-write mapping just made, ours.
        && let Err(why) = unsafe {
            device_access::protect(
                p as usize,
                map_len,
                agents::reach_of(gpu, mapping_agents.iter().copied()),
            )
        }
    {
        eprintln!("hsa-cpu: cannot attach GPU memory: {why}");
        // SAFETY: the mapping just made, used by nobody yet.
        unsafe { libc::munmap(p, map_len) };
        return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    let user = p as usize + page_offset;
    // SAFETY: a duplicate of a descriptor we own.
    let dup = unsafe { libc::fcntl(memfd.fd.0, libc::F_DUPFD_CLOEXEC, 0) };
    ATTACHMENTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            user,
            Attachment {
                map_base: p as usize,
                map_len,
                size: len,
                owner,
                fd: dup,
                data_len: memfd.data_len,
                offset,
            },
        );
    Ok(user)
}

/// The export remembered by the stale-ipc-attach fault.
struct Remembered {
    handle: hsa_amd_ipc_memory_t,
    len: usize,
    offset: u64,
    memfd: OwnerMemfd,
}

static REMEMBERED: Mutex<Option<Remembered>> = Mutex::new(None);

/// Whether DITTO_HSA_CPU_FAULT names stale-ipc-attach (read once).
pub fn stale_attach_fault() -> bool {
    static ON: LazyLock<bool> = LazyLock::new(|| {
        std::env::var("DITTO_HSA_CPU_FAULT")
            .is_ok_and(|v| v.split(',').any(|f| f.trim() == "stale-ipc-attach"))
    });
    *ON
}

/// # Safety
/// `handle` is null or valid for reads of one IPC handle; `agents` is
/// null or holds `num_agents` agents; `mapped` is null or valid for
/// writes of one pointer.
pub(crate) unsafe fn memory_attach(
    handle: *const hsa_amd_ipc_memory_t,
    len: usize,
    num_agents: u32,
    agents: *const hsa_agent_t,
    mapped: *mut *mut c_void,
) -> hsa_status_t {
    if handle.is_null() || mapped.is_null() || (num_agents > 0 && agents.is_null()) {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let list: &[hsa_agent_t] = if num_agents > 0 {
        // SAFETY: the caller passes num_agents agents.
        unsafe { std::slice::from_raw_parts(agents, num_agents as usize) }
    } else {
        &[]
    };
    if !list.iter().all(|a| agents::is_agent(*a)) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    // SAFETY: handle is non-null and points to 32 readable bytes.
    let raw = unsafe { *handle };
    let h = IpcHandle::decode(&raw);
    if len == 0 || len as u64 > h.size {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let memfd = match open_owner_memfd(&h) {
        Ok(memfd) => memfd,
        Err(status) => return status,
    };
    let user = if stale_attach_fault() {
        let mut remembered = REMEMBERED.lock().unwrap_or_else(|e| e.into_inner());
        let stale = remembered
            .as_ref()
            .filter(|r| r.len == len && r.handle.handle != raw.handle)
            .map(|r| map_attachment(&r.memfd, r.offset, len, h.owner_agent(), list));
        let user = match stale {
            Some(stale) => {
                // One line per injected fault, so a test can count them.
                eprintln!(
                    "hsa-cpu: fault injection: served a stale mapping for an IPC attach of {len} bytes"
                );
                stale
            }
            None => map_attachment(&memfd, h.offset, len, h.owner_agent(), list),
        };
        *remembered = Some(Remembered {
            handle: raw,
            len,
            offset: h.offset,
            memfd,
        });
        user
    } else {
        map_attachment(&memfd, h.offset, len, h.owner_agent(), list)
    };
    match user {
        Ok(user) => {
            // SAFETY: mapped is a non-null out pointer supplied by the caller.
            unsafe { mapped.write(user as *mut c_void) };
            HSA_STATUS_SUCCESS
        }
        Err(status) => status,
    }
}

pub(crate) fn memory_detach(mapped: *mut c_void) -> hsa_status_t {
    let removed = ATTACHMENTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(mapped as usize));
    match removed {
        Some(a) => {
            // SAFETY: unmapping exactly the mapping made by memory_attach,
            // and closing its duplicate descriptor.
            unsafe {
                libc::munmap(a.map_base as *mut c_void, a.map_len);
                if a.fd >= 0 {
                    libc::close(a.fd);
                }
            }
            HSA_STATUS_SUCCESS
        }
        None => HSA_STATUS_ERROR_INVALID_ARGUMENT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_release_accepts_the_lengths_its_ipc_create_accepts() {
        // A 1 KiB hipMalloc: asked 1024, page rounded 4096, other lengths.
        let accepted =
            |abi| [1024, 4096, 2048, 8192].map(|len| ipc_length_accepted(abi, len, 1024));
        assert_eq!(accepted(Abi::Rocm5_2), [false, true, false, false]);
        for abi in [Abi::Rocm5_5, Abi::Rocm5_6, Abi::Rocm6_4] {
            assert_eq!(accepted(abi), [true, true, false, false], "{abi:?}");
        }
        for abi in [Abi::Rocm7_2, Abi::Rocm10, Abi::NextMajor] {
            assert_eq!(accepted(abi), [true, false, false, false], "{abi:?}");
        }
        // A whole number of pages is the same either way.
        for abi in Abi::ALL {
            assert!(ipc_length_accepted(abi, 8192, 8192), "{abi:?}");
        }
    }

    #[test]
    fn handle_round_trips_every_field() {
        let h = IpcHandle {
            pid: 77,
            fd: 12,
            owner: 3,
            inode: 0x1_0000_0005,
            offset: 0x20_3000,
            serial: 41,
            size: (5 << 32) + 9,
        };
        assert_eq!(IpcHandle::decode(&h.encode()), h);
    }
}

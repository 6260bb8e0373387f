//! IPC memory: exports pool allocations as 32-byte handles and maps handles
//! from any process. Owns the registry of attachments (mapped pointer → exact
//! mapping). Maps afresh on every attach (no cache, as ROCr) and unmaps
//! exactly that mapping on detach; never maps anything but our own memfds.
//!
//! Handle layout (`hsa_amd_ipc_memory_t.handle[0..8]`, u32 words):
//!   [0] owner pid   [1] memfd number in the owner   [2..4] memfd inode (lo, hi)
//!   [4..6] offset of the allocation in the memfd (lo, hi; page aligned)
//!   [6..8] allocation size in bytes (lo, hi)
//! The inode is the generation check: a handle whose fd number was closed and
//! reused for another file (or another memfd) no longer matches and is refused.

use crate::memory::{self, MEMFD_NAME, PAGE};
use hsa::*;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpcHandle {
    pub pid: u32,
    pub fd: u32,
    pub inode: u64,
    pub offset: u64,
    pub size: u64,
}

impl IpcHandle {
    pub fn encode(&self) -> hsa_amd_ipc_memory_t {
        let lo = |v: u64| v as u32;
        let hi = |v: u64| (v >> 32) as u32;
        hsa_amd_ipc_memory_t {
            handle: [
                self.pid,
                self.fd,
                lo(self.inode),
                hi(self.inode),
                lo(self.offset),
                hi(self.offset),
                lo(self.size),
                hi(self.size),
            ],
        }
    }

    pub fn decode(h: &hsa_amd_ipc_memory_t) -> Self {
        let w = |i: usize| h.handle[i] as u64 | (h.handle[i + 1] as u64) << 32;
        IpcHandle {
            pid: h.handle[0],
            fd: h.handle[1],
            inode: w(2),
            offset: w(4),
            size: w(6),
        }
    }
}

struct Attachment {
    map_base: usize,
    map_len: usize,
    size: usize,
}

/// Mapped pointer → its mapping.
static ATTACHMENTS: LazyLock<Mutex<BTreeMap<usize, Attachment>>> = LazyLock::new(Default::default);

/// Base and size of the attachment containing `ptr` (for pointer info).
pub(crate) fn attachment_containing(ptr: usize) -> Option<(usize, usize)> {
    let map = ATTACHMENTS.lock().unwrap_or_else(|e| e.into_inner());
    let (p, a) = map.range(..=ptr).next_back()?;
    (ptr < p + a.size.max(1)).then_some((*p, a.size))
}

/// Number of live attachments in this process.
pub fn attachment_count() -> usize {
    ATTACHMENTS.lock().unwrap_or_else(|e| e.into_inner()).len()
}

pub(crate) fn memory_create(
    ptr: *mut c_void,
    len: usize,
    handle: *mut hsa_amd_ipc_memory_t,
) -> hsa_status_t {
    if ptr.is_null() || handle.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // As ROCr: only the allocation base with exactly its size is exportable.
    let Some((c, info)) = memory::export_info(ptr) else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    if len != c.size {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let h = IpcHandle {
        pid: std::process::id(),
        fd: info.fd as u32,
        inode: info.inode,
        offset: info.offset,
        size: info.size,
    };
    // SAFETY: handle is a non-null out pointer supplied by the caller.
    unsafe { handle.write(h.encode()) };
    HSA_STATUS_SUCCESS
}

/// Opens the owner's memfd through /proc, checking name, inode and size.
fn open_owner_memfd(h: &IpcHandle) -> Result<i32, hsa_status_t> {
    if h.pid == 0 || h.size == 0 {
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
    // SAFETY: open/fstat/close on a path and a descriptor we own.
    unsafe {
        let fd = libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
        }
        let mut st: libc::stat = std::mem::zeroed();
        let ok = libc::fstat(fd, &mut st) == 0
            && st.st_ino == h.inode
            && (st.st_size as u64) >= h.offset + h.size;
        if !ok {
            libc::close(fd);
            return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
        }
        Ok(fd)
    }
}

pub(crate) fn memory_attach(
    handle: *const hsa_amd_ipc_memory_t,
    len: usize,
    _num_agents: u32,
    _agents: *const hsa_agent_t,
    mapped: *mut *mut c_void,
) -> hsa_status_t {
    if handle.is_null() || mapped.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: handle is non-null and points to 32 readable bytes.
    let h = IpcHandle::decode(unsafe { &*handle });
    if len == 0 || len as u64 > h.size {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let fd = match open_owner_memfd(&h) {
        Ok(fd) => fd,
        Err(status) => return status,
    };
    let page_offset = h.offset as usize % PAGE;
    let map_start = h.offset as usize - page_offset;
    let map_len = (page_offset + len).div_ceil(PAGE) * PAGE;
    // SAFETY: mapping a range of a memfd checked above to be large enough.
    let p = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            map_start as libc::off_t,
        );
        libc::close(fd);
        p
    };
    if p == libc::MAP_FAILED {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    let user = p as usize + page_offset;
    ATTACHMENTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            user,
            Attachment {
                map_base: p as usize,
                map_len,
                size: len,
            },
        );
    // SAFETY: mapped is a non-null out pointer supplied by the caller.
    unsafe { mapped.write(user as *mut c_void) };
    HSA_STATUS_SUCCESS
}

pub(crate) fn memory_detach(mapped: *mut c_void) -> hsa_status_t {
    let removed = ATTACHMENTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(mapped as usize));
    match removed {
        Some(a) => {
            // SAFETY: unmapping exactly the mapping made by memory_attach.
            unsafe { libc::munmap(a.map_base as *mut c_void, a.map_len) };
            HSA_STATUS_SUCCESS
        }
        None => HSA_STATUS_ERROR_INVALID_ARGUMENT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_round_trips_every_field() {
        let h = IpcHandle {
            pid: 77,
            fd: 12,
            inode: 0x1_0000_0005,
            offset: 0x20_3000,
            size: (5 << 32) + 9,
        };
        assert_eq!(IpcHandle::decode(&h.encode()), h);
    }
}

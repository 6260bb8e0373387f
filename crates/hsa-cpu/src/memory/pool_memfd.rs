//! One pool memfd: how a pool allocation's bytes are kept so that `ipc`
//! can export them and `visibility` can keep their older copy. Every pool
//! byte lives in a memfd named "hsa-cpu-pool" mapped MAP_SHARED; the memfd
//! is `[data: len][metadata: PAGE][shadow: len]`. Owns that layout, the
//! mapping (`SharedMapping`) and one allocation's place in it
//! (`Region`, for `visibility`, `ipc` and the copy engines); knows
//! nothing of which allocation lives where (`allocations`).
//!
//! Liveness for IPC: the metadata page (never mapped for the application)
//! holds, per data page, the u32 serial of the live allocation that starts
//! there (0: none), so an importer can tell a freed fragment (whose 2 MiB
//! block lives on) from a live one.
//!
//! Visibility (`visibility`): the metadata page's second half holds, per
//! data page, the stale flag of the allocation that starts there (1: its
//! bytes as the copy engines see them are in the shadow); the shadow region
//! after the metadata page is as long as the data and sparse (only a stale
//! allocation's pages are ever written).

use crate::memory::device_access::{self, Reach};
use std::ffi::c_void;

pub const PAGE: usize = 4096;
pub const MEMFD_NAME: &str = "hsa-cpu-pool";

/// A memfd mapped MAP_SHARED into this process; unmapped and closed on drop.
/// The memfd is `len + PAGE` bytes: the data, then the metadata page.
#[derive(Debug)]
pub(crate) struct SharedMapping {
    pub fd: i32,
    pub base: usize,
    pub len: usize,
    pub inode: u64,
}

impl SharedMapping {
    /// `device`: the GPU whose memory it is, which CPU threads and other
    /// GPUs may not touch (`device_access::protect`).
    pub(crate) fn new(len: usize, device: Option<usize>) -> Option<Self> {
        // SAFETY: plain syscalls on fds and memory we own (`protect` too: on
        // the read-write mapping made here); every failure is checked.
        unsafe {
            let fd = libc::memfd_create(c"hsa-cpu-pool".as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return None;
            }
            if libc::ftruncate(fd, memfd_size(len) as libc::off_t) != 0 {
                libc::close(fd);
                return None;
            }
            let mut st: libc::stat = std::mem::zeroed();
            libc::fstat(fd, &mut st);
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if p == libc::MAP_FAILED {
                libc::close(fd);
                return None;
            }
            if let Some(gpu) = device
                && let Err(why) = device_access::protect(p as usize, len, Reach::Gpu(gpu))
            {
                eprintln!("hsa-cpu: cannot allocate GPU memory: {why}");
                libc::munmap(p, len);
                libc::close(fd);
                return None;
            }
            Some(SharedMapping {
                fd,
                base: p as usize,
                len,
                inode: st.st_ino,
            })
        }
    }
}

impl SharedMapping {
    /// Records `serial` as the allocation starting at data page `page`
    /// (its stale flag cleared: a new allocation, or none, starts there).
    pub(crate) fn set_serial(&self, page: usize, serial: u32) {
        let fresh = 0u32.to_le_bytes();
        // SAFETY: pwrite of 4 bytes from a local buffer into our own memfd's
        // metadata page.
        unsafe {
            libc::pwrite(
                self.fd,
                fresh.as_ptr() as *const c_void,
                4,
                stale_flag_at(self.len as u64, (page * PAGE) as u64) as libc::off_t,
            )
        };
        let bytes = serial.to_le_bytes();
        // SAFETY: pwrite of 4 bytes from a local buffer into our own memfd,
        // inside its metadata page (page < len / PAGE <= PAGE / 4).
        unsafe {
            libc::pwrite(
                self.fd,
                bytes.as_ptr() as *const c_void,
                4,
                (self.len + page * 4) as libc::off_t,
            )
        };
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: base/len is our own mapping and fd our own descriptor.
        unsafe {
            libc::munmap(self.base as *mut c_void, self.len);
            libc::close(self.fd);
        }
    }
}

/// Bytes of a pool memfd whose data is `len` bytes.
pub(crate) fn memfd_size(len: usize) -> usize {
    2 * len + PAGE
}

/// The data length of a pool memfd of `memfd_size` bytes.
pub(crate) fn data_len_of(memfd_size: u64) -> u64 {
    memfd_size.saturating_sub(PAGE as u64) / 2
}

/// Where, in a memfd of `data_len` data bytes, the stale flag of the
/// allocation at `offset` lies.
fn stale_flag_at(data_len: u64, offset: u64) -> u64 {
    data_len + (PAGE / 2) as u64 + (offset / PAGE as u64) * 4
}

/// One allocation's place in its memfd, as `visibility` and the copy
/// engines use it: the flag and shadow of its bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Region {
    /// The memfd (owned by `allocations` or by an IPC attachment).
    pub fd: i32,
    pub data_len: u64,
    /// The allocation's offset in the memfd.
    pub offset: u64,
    pub size: u64,
    /// Where the allocation is mapped in this process.
    pub base: usize,
}

impl Region {
    /// Whether the copy engines see the shadow of this allocation.
    pub(crate) fn is_stale(&self) -> bool {
        let mut flag = [0u8; 4];
        // SAFETY: pread of 4 bytes of the memfd's metadata page into a local.
        let n = unsafe {
            libc::pread(
                self.fd,
                flag.as_mut_ptr() as *mut c_void,
                4,
                stale_flag_at(self.data_len, self.offset) as libc::off_t,
            )
        };
        n == 4 && u32::from_le_bytes(flag) != 0
    }

    fn shadow_at(&self) -> u64 {
        self.data_len + PAGE as u64 + self.offset
    }

    fn set_flag(&self, fd: i32, value: u32) -> bool {
        let bytes = value.to_le_bytes();
        // SAFETY: pwrite of 4 bytes from a local into the metadata page.
        let n = unsafe {
            libc::pwrite(
                fd,
                bytes.as_ptr() as *const c_void,
                4,
                stale_flag_at(self.data_len, self.offset) as libc::off_t,
            )
        };
        n == 4
    }

    /// Copies the allocation's present bytes into its shadow (in the
    /// kernel: no CPU thread reads GPU memory) and flags it stale; `fd` is
    /// a descriptor of the memfd.
    pub(crate) fn keep_present_bytes(&self, fd: i32) -> Result<(), ()> {
        let mut from = self.offset as libc::loff_t;
        let mut to = self.shadow_at() as libc::loff_t;
        let mut left = self.size as usize;
        while left > 0 {
            // SAFETY: copy_file_range within one memfd, between its data
            // and its shadow (disjoint), with valid offset pointers.
            let n = unsafe { libc::copy_file_range(fd, &mut from, fd, &mut to, left, 0) };
            if n <= 0 {
                return Err(());
            }
            left -= n as usize;
        }
        if self.set_flag(fd, 1) {
            Ok(())
        } else {
            Err(())
        }
    }

    /// The allocation's writes are visible to every reader: its flag is
    /// cleared and its shadow pages given back.
    pub(crate) fn made_visible(&self, fd: i32) {
        self.set_flag(fd, 0);
        let start = self.shadow_at();
        let len = (self.size as usize).div_ceil(PAGE) * PAGE;
        // SAFETY: punching a hole in our own memfd's shadow region.
        unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                start as libc::off_t,
                len as libc::off_t,
            )
        };
    }

    /// Reads `len` bytes of the shadow, `at` bytes into the allocation,
    /// into `dst` (the caller may write there: a copy engine).
    ///
    /// # Safety
    /// `dst` is valid for writes of `len` bytes.
    pub(crate) unsafe fn read_shadow(&self, at: u64, dst: *mut u8, len: usize) -> bool {
        let mut done = 0usize;
        while done < len {
            // SAFETY: dst holds len bytes (the copy's destination).
            let n = unsafe {
                libc::pread(
                    self.fd,
                    dst.add(done) as *mut c_void,
                    len - done,
                    (self.shadow_at() + at + done as u64) as libc::off_t,
                )
            };
            if n <= 0 {
                return false;
            }
            done += n as usize;
        }
        true
    }
}

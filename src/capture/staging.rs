//! The staging file of a collector connection: one memfd, shared with the
//! collector once (ToolMessage::Staging), into which the worker copies the
//! small buffers of a completed dispatch so that it can release the
//! dispatch at once instead of waiting for the collector to map, copy and
//! store them (protocol `Transport::Staged`).
//!
//! Owns the file, where each copy goes in it ([`Ring`]: regions handed out
//! in order and given back in order once the collector has finished the
//! frames that described them, as the progress counter in the file's
//! header says). The copy itself is `shared_memory::copy_from_address`
//! (pwrite from the application's memory): a range that is not readable
//! (device memory the CPU cannot read) is an error, never a fault; the
//! caller then sends the buffer another way.
//! Nothing here talks to the collector.

use super::shared_memory::CopyError;
use ditto_protocol::STAGING_HEADER_BYTES;
use std::collections::VecDeque;
use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

/// Name of the staging memfd (`/memfd:ditto-staging` in `/proc/<pid>/fd`).
pub const STAGING_MEMFD_NAME: &CStr = c"ditto-staging";

/// Largest buffer that is staged; larger ones travel by IPC (the collector
/// reads them where they are, without a second copy in the application).
pub const MAX_STAGED_BUFFER: u64 = 1 << 20;

/// Unfinished frames after which staging first asks the collector's
/// progress.
const RECLAIM_AFTER: usize = 32;

/// Regions are handed out at multiples of this.
const ALIGN: u64 = 64;

/// Placement of copies in a file of `size` bytes used as a ring: a region
/// is taken at `head` (or at 0 when the end has no room), and everything
/// up to a position is given back at once, in the order it was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    size: u64,
    /// Where the next region starts.
    head: u64,
    /// Start of the oldest region still in use.
    tail: u64,
    /// No region is in use (head == tail is ambiguous otherwise).
    empty: bool,
}

impl Ring {
    pub fn new(size: u64) -> Ring {
        Ring {
            size,
            head: 0,
            tail: 0,
            empty: true,
        }
    }

    /// Offset of a free region of `len` bytes, now in use; `None` when
    /// there is no room until earlier regions are given back.
    pub fn take(&mut self, len: u64) -> Option<u64> {
        let len = len.checked_next_multiple_of(ALIGN)?.max(ALIGN);
        if len > self.size {
            return None;
        }
        if self.empty {
            self.head = 0;
            self.tail = 0;
        }
        let at = if self.empty || self.head > self.tail {
            // In use: [tail, head); free: [head, size) and [0, tail).
            if self.head + len <= self.size {
                self.head
            } else if len <= self.tail {
                0
            } else {
                return None;
            }
        } else if self.head + len <= self.tail {
            // Wrapped: in use [tail, size) and [0, head); free [head, tail).
            self.head
        } else {
            return None;
        };
        self.head = at + len;
        self.empty = false;
        Some(at)
    }

    /// Where the next region would start: given to [`Ring::give_back`]
    /// later, it returns every region taken before this call.
    pub fn mark(&self) -> u64 {
        self.head
    }

    /// Gives back every region taken before `mark` was read. (`mark` equals
    /// the head only when nothing was taken since: to wrap around to it,
    /// the head would have had to pass the tail, which is at or before it.)
    pub fn give_back(&mut self, mark: u64) {
        self.tail = mark;
        if mark == self.head {
            self.empty = true;
        }
    }
}

/// Why the staging file could not be made (buffers then travel by IPC).
#[derive(Debug, thiserror::Error)]
pub enum StagingError {
    #[error("a staging file of {size} bytes has no room after its header")]
    TooSmall { size: u64 },
    #[error("memfd_create for the staging file failed: {0}")]
    MemfdCreate(io::Error),
    #[error("cannot size the staging file to {size} bytes: {source}")]
    Size { size: u64, source: io::Error },
}

/// The memfd, its ring (over the bytes after the header) and the frames
/// sent: (number of the Dispatch frame, ring mark after its regions),
/// oldest first, until the collector has finished them.
#[derive(Debug)]
pub struct StagingFile {
    file: File,
    ring: Ring,
    sent: VecDeque<(u64, u64)>,
}

impl StagingFile {
    /// A new memfd of `size` bytes (sparse), close-on-exec; its header
    /// (the collector's progress) reads 0.
    pub fn create(size: u64) -> Result<StagingFile, StagingError> {
        if size < 2 * STAGING_HEADER_BYTES {
            return Err(StagingError::TooSmall { size });
        }
        // SAFETY: a valid C string and flags; the result is checked.
        let raw = unsafe { libc::memfd_create(STAGING_MEMFD_NAME.as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(StagingError::MemfdCreate(io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a new fd owned by nobody else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(raw) });
        file.set_len(size)
            .map_err(|source| StagingError::Size { size, source })?;
        Ok(StagingFile {
            file,
            ring: Ring::new(size - STAGING_HEADER_BYTES),
            sent: VecDeque::new(),
        })
    }

    pub fn size(&self) -> u64 {
        self.ring.size + STAGING_HEADER_BYTES
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Whether a buffer of `len` bytes is small enough to be staged here
    /// (room for it is another matter: [`StagingFile::stage`] says).
    pub fn takes(&self, len: u64) -> bool {
        len <= MAX_STAGED_BUFFER.min(self.ring.size / 4)
    }

    /// Copies the `len` bytes at `address` of this process into a free
    /// region (giving back the regions of finished frames first when there
    /// is no room); its offset in the file, or `Ok(None)` when the buffer is
    /// too large to stage or there is still no room. `Err` when the range
    /// is not readable (the region comes back with the next frame's).
    pub fn stage(&mut self, address: u64, len: u64) -> Result<Option<u64>, CopyError> {
        if !self.takes(len) {
            return Ok(None);
        }
        if self.sent.len() >= RECLAIM_AFTER {
            // Regions come back early, so that a collector that keeps up
            // keeps the ring (and the pages it touches) near its start.
            self.reclaim();
        }
        let taken = match self.ring.take(len) {
            Some(at) => Some(at),
            None => {
                self.reclaim();
                self.ring.take(len)
            }
        };
        let Some(at) = taken.map(|at| at + STAGING_HEADER_BYTES) else {
            return Ok(None);
        };
        crate::capture::shared_memory::copy_from_address(
            self.file.as_fd(),
            address,
            len,
            at,
            "the staging file",
        )?;
        Ok(Some(at))
    }

    /// Dispatch frame number `frame` (from 0 on the connection) was sent:
    /// every region staged so far is described by it or by earlier frames.
    pub fn sent(&mut self, frame: u64) {
        self.sent.push_back((frame, self.ring.mark()));
    }

    /// Gives back the regions of the frames the collector has finished;
    /// returns how many sent frames it has not finished yet.
    pub fn reclaim(&mut self) -> usize {
        let finished = self.collector_progress();
        while let Some(&(frame, mark)) = self.sent.front() {
            if frame >= finished {
                break;
            }
            self.sent.pop_front();
            self.ring.give_back(mark);
        }
        self.sent.len()
    }

    /// Sent frames not known to be finished (as of the last [`StagingFile::reclaim`]).
    pub fn unfinished(&self) -> usize {
        self.sent.len()
    }

    /// The collector's progress counter: Dispatch frames it has finished.
    fn collector_progress(&self) -> u64 {
        let mut word = [0u8; 8];
        match self.file.read_exact_at(&mut word, 0) {
            Ok(()) => u64::from_le_bytes(word),
            // Unreadable: nothing is known to be finished.
            Err(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn regions_are_taken_in_order_wrap_to_the_start_and_wait_for_what_is_in_use() {
        let mut r = Ring::new(1024);
        assert_eq!(r.take(100), Some(0)); // 128 bytes at 0
        assert_eq!(r.take(256), Some(128));
        let first_two = r.mark();
        assert_eq!(first_two, 384);
        assert_eq!(r.take(512), Some(384)); // up to 896
        // 128 left at the end, nothing free at the start.
        assert_eq!(r.take(200), None);
        r.give_back(first_two);
        // The end still has no room for 256: wraps to 0, below tail 384.
        assert_eq!(r.take(256), Some(0));
        assert_eq!(r.take(128), Some(256));
        // Free now: [384, 384): none until 896 is given back.
        assert_eq!(r.take(64), None);
        let all = r.mark();
        r.give_back(all);
        assert_eq!(r.take(1024), Some(0));
        assert_eq!(r.take(1), None);
        assert_eq!(Ring::new(1024).take(1025), None);
    }

    #[test]
    fn giving_back_a_mark_taken_after_the_last_region_empties_the_ring() {
        let mut r = Ring::new(256);
        assert_eq!(r.take(128), Some(0));
        let m = r.mark();
        r.give_back(m);
        assert_eq!(r.take(256), Some(0));
        // A region taken after the mark stays in use.
        let mut r = Ring::new(256);
        assert_eq!(r.take(64), Some(0));
        let m = r.mark();
        assert_eq!(r.take(64), Some(64));
        r.give_back(m);
        assert_eq!(r.take(256), None);
        assert_eq!(r.take(128), Some(128));
    }

    #[test]
    fn a_staged_buffer_reads_back_at_its_offset_and_unreadable_memory_is_an_error() {
        let mut s = StagingFile::create(1 << 20).unwrap();
        let first: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let second = vec![7u8; 4096];
        let a = s
            .stage(first.as_ptr() as u64, first.len() as u64)
            .unwrap()
            .unwrap();
        let b = s.stage(second.as_ptr() as u64, 4096).unwrap().unwrap();
        assert_eq!((a, b), (64, 64 + 1024), "after the 64-byte header");
        let mut back = vec![0u8; 1000];
        s.file.read_exact_at(&mut back, a).unwrap();
        assert_eq!(back, first);
        let mut back = vec![0u8; 4096];
        s.file.read_exact_at(&mut back, b).unwrap();
        assert_eq!(back, second);
        // Larger than a quarter of the file: not staged.
        assert_eq!(
            s.stage(second.as_ptr() as u64, (1 << 18) + 1).unwrap(),
            None
        );
        // Address 8 is never mapped: EFAULT, not a crash.
        let e = s.stage(8, 64).unwrap_err().to_string();
        assert!(e.contains("Bad address"), "{e}");
    }

    #[test]
    fn regions_come_back_once_the_collector_counts_their_frames_finished() {
        // 64 header + 4 x 64-byte regions.
        let mut s = StagingFile::create(64 + 256).unwrap();
        let bytes = [9u8; 64];
        let at = |s: &mut StagingFile| s.stage(bytes.as_ptr() as u64, 64).unwrap();
        // The largest staged buffer is a quarter of the ring: 64 bytes.
        assert_eq!(s.stage(bytes.as_ptr() as u64, 65).unwrap(), None);
        assert_eq!(at(&mut s), Some(64));
        s.sent(0);
        assert_eq!(at(&mut s), Some(128));
        assert_eq!(at(&mut s), Some(192));
        s.sent(1);
        assert_eq!(at(&mut s), Some(256));
        s.sent(2);
        // Full, and the collector finished nothing.
        assert_eq!(at(&mut s), None);
        assert_eq!(s.unfinished(), 3);
        // It finished frame 0: its region comes back, frames 1 and 2 stay.
        s.file.write_all_at(&1u64.to_le_bytes(), 0).unwrap();
        assert_eq!(at(&mut s), Some(64));
        assert_eq!(s.unfinished(), 2);
        assert_eq!(at(&mut s), None);
        s.sent(3);
        s.file.write_all_at(&4u64.to_le_bytes(), 0).unwrap();
        assert_eq!(s.reclaim(), 0);
        assert_eq!(
            at(&mut s),
            Some(64),
            "everything given back: the ring starts over"
        );
    }

    #[test]
    fn a_collector_that_keeps_up_keeps_the_ring_near_its_start() {
        let mut s = StagingFile::create(1 << 20).unwrap();
        let bytes = [1u8; 100];
        let mut furthest = 0;
        for frame in 0..1000u64 {
            let at = s.stage(bytes.as_ptr() as u64, 100).unwrap().unwrap();
            furthest = furthest.max(at);
            s.sent(frame);
            // The collector finishes each frame as it comes.
            s.file.write_all_at(&(frame + 1).to_le_bytes(), 0).unwrap();
        }
        // 128-byte regions; given back every RECLAIM_AFTER frames.
        assert!(
            furthest <= 64 + 128 * RECLAIM_AFTER as u64,
            "reached {furthest}"
        );
    }
}

//! Room for the last manifest when the file system fills. While a snapshot
//! is written, a hidden file of its directory (`.ditto-tmp-room`, a
//! killed writer's leftover like any temporary file) holds blocks
//! allocated ahead (`fallocate`): a bit more than the manifest's size,
//! grown as the manifest grows. When a write finds the file system full,
//! the writer gives these blocks back and writes the manifest that says
//! what the snapshot holds and that it is incomplete. Owns that file and
//! what counts as a full file system; never decides what is written.

use super::atomic::TEMPORARY_PREFIX;
use super::dir_handle::DirHandle;
use super::error::StoreError;
use std::fs::File;
use std::sync::Arc;

/// The room kept is the manifest's size, half of it again and this much.
const MARGIN: u64 = 64 << 10;

/// Name of the file holding the room.
pub(super) fn file_name() -> String {
    format!("{TEMPORARY_PREFIX}room")
}

/// Blocks kept for the last manifest; nothing where the file system
/// cannot allocate ahead (then a full file system may leave the manifest
/// stale, and the journal says what was stored).
#[derive(Debug)]
pub struct Room {
    dir: Arc<DirHandle>,
    file: Option<File>,
    kept: u64,
    /// The manifest size last grown for.
    asked: u64,
    /// Given back while the snapshot is idle ([`Room::pause`]).
    paused: bool,
}

impl Room {
    /// Keeps [`MARGIN`] bytes in `dir`.
    pub fn keep(dir: &Arc<DirHandle>) -> Room {
        let mut room = Room {
            dir: dir.clone(),
            file: None,
            kept: 0,
            asked: 0,
            paused: true,
        };
        room.resume();
        room
    }

    /// Gives the room back while no process writes the snapshot (a
    /// collector of many runs keeps no room or fd per idle one).
    pub fn pause(&mut self) {
        if self.file.is_some() {
            self.give_back();
            self.paused = true;
        }
    }

    /// Keeps the room again after [`Self::pause`].
    pub fn resume(&mut self) {
        if !self.paused {
            return;
        }
        self.paused = false;
        self.file = self.dir.create_truncated(&file_name(), 0o600).ok();
        if self.grow_for(self.asked).is_err() {
            self.give_back();
        }
    }

    /// Grows the room to fit a manifest of `manifest_bytes`: an error when
    /// the file system is full (the room is left as it was).
    pub fn grow_for(&mut self, manifest_bytes: u64) -> std::io::Result<()> {
        self.asked = self.asked.max(manifest_bytes);
        let needed = manifest_bytes + manifest_bytes / 2 + MARGIN;
        let Some(file) = &self.file else {
            return Ok(());
        };
        if needed <= self.kept {
            return Ok(());
        }
        // A quarter more than needed: one allocation per quarter grown.
        let wanted = needed + needed / 4;
        match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, wanted) {
            Ok(()) => {
                self.kept = wanted;
                Ok(())
            }
            // A file system that cannot allocate ahead: no room is kept.
            Err(rustix::io::Errno::OPNOTSUPP) => {
                self.give_back();
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Bytes kept now.
    #[cfg(test)]
    pub fn kept(&self) -> u64 {
        self.kept
    }

    /// Gives the room back to the file system (the file removed).
    pub fn give_back(&mut self) {
        if self.file.take().is_some() {
            let _ = self.dir.remove(&file_name());
        }
        self.kept = 0;
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// Whether `e` says the file system (or the user's quota) is full.
pub fn is_full(e: &StoreError) -> bool {
    match e {
        StoreError::Io { error, .. } => matches!(
            error.raw_os_error(),
            Some(libc::ENOSPC) | Some(libc::EDQUOT)
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_room_grows_with_the_manifest_and_goes_with_its_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Arc::new(DirHandle::open(tmp.path()).unwrap());
        let mut room = Room::keep(&dir);
        let path = tmp.path().join(file_name());
        // tmpfs and ext4 both allocate ahead.
        assert_eq!(room.kept(), MARGIN + MARGIN / 4);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), room.kept());
        room.grow_for(1 << 20).unwrap();
        let needed = (1 << 20) + (1 << 19) + MARGIN;
        assert_eq!(room.kept(), needed + needed / 4);
        room.grow_for(1 << 20).unwrap();
        room.grow_for(1000).unwrap();
        assert_eq!(room.kept(), needed + needed / 4, "never shrinks");
        drop(room);
        assert!(!path.exists());
    }
}

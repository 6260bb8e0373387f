//! What a directory offered as a snapshot's place holds, decided before
//! anything is written there (and before `ditto run` starts the
//! application): nothing, a killed writer's leftovers, a ditto snapshot of
//! this format (to be replaced), or anything else, which is refused naming
//! what is there. A symbolic link is refused too: a snapshot is written
//! where the user named, never where a link points; and so is a directory
//! of another user or one every user may write in (another user could
//! plant links under the names ditto writes). Owns that decision only; the
//! writer acts on it, and checks again once it created the directory.

use super::atomic::only_leftovers_of_a_killed_writer;
use super::dir_handle::DirHandle;
use super::error::{StoreError, io_err};
use super::manifest::{MANIFEST_FILE, Manifest, SNAPSHOT_FORMAT};
use std::io::Read;
use std::path::Path;

/// What the place holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputDir {
    /// Nothing there yet: the directory is created.
    Missing,
    /// An empty directory.
    Empty,
    /// Only the temporary files and journal of a writer killed before its
    /// first manifest.
    Leftovers,
    /// A ditto snapshot of this format: replaced.
    Snapshot,
}

fn refused(dir: &Path, what: String) -> StoreError {
    StoreError::ForeignDirectory {
        path: dir.to_path_buf(),
        what,
    }
}

/// What `dir` holds, or why a snapshot may not be written there.
pub fn check(dir: &Path) -> Result<OutputDir, StoreError> {
    match std::fs::symlink_metadata(dir) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(OutputDir::Missing),
        Err(e) => return Err(io_err(dir)(e)),
    }
    check_opened(&open(dir)?)
}

/// Opens the directory at `dir` for a snapshot: a link or a file there is
/// refused naming what it is.
pub fn open(dir: &Path) -> Result<DirHandle, StoreError> {
    DirHandle::open(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::Other => refused(dir, e.to_string()),
        _ => io_err(dir)(e),
    })
}

/// [`check`] of a directory already opened: its owner and mode as opened,
/// and what it holds, read through the handle.
pub fn check_opened(handle: &DirHandle) -> Result<OutputDir, StoreError> {
    let dir = handle.path();
    check_owner_and_mode(handle)?;
    let manifest = handle.shown(MANIFEST_FILE);
    match handle.open_regular(MANIFEST_FILE) {
        Ok(Some(mut file)) => {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).map_err(io_err(&manifest))?;
            return match serde_json::from_slice::<Manifest>(&bytes) {
                Ok(m) if m.format == SNAPSHOT_FORMAT => Ok(OutputDir::Snapshot),
                Ok(m) => Err(refused(
                    dir,
                    format!(
                        "its manifest.json is of snapshot format {}, this ditto writes {SNAPSHOT_FORMAT}",
                        m.format
                    ),
                )),
                Err(e) => Err(refused(
                    dir,
                    format!("it holds a manifest.json that is not a ditto snapshot's ({e})"),
                )),
            };
        }
        Ok(None) => {}
        Err(_) => {
            return Err(refused(
                dir,
                "its manifest.json is not a regular file".into(),
            ));
        }
    }
    let mut names: Vec<String> = handle
        .names()
        .map_err(io_err(dir))?
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    if names.is_empty() {
        return Ok(OutputDir::Empty);
    }
    if only_leftovers_of_a_killed_writer(&names) {
        return Ok(OutputDir::Leftovers);
    }
    names.sort();
    let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
    let more = if names.len() > 3 {
        format!(" and {} more", names.len() - 3)
    } else {
        String::new()
    };
    Err(refused(
        dir,
        format!("it holds {}{more} and no manifest.json", shown.join(", ")),
    ))
}

/// Refuses a directory (as opened) that ditto must not write in: another
/// user's, one every user may write in (another user could plant links
/// under the names ditto writes), or one this user may not write in. The
/// rule of every directory ditto writes a user's files into (`--out`,
/// `replay --emit`).
pub fn check_owner_and_mode(handle: &DirHandle) -> Result<(), StoreError> {
    let dir = handle.path();
    let (owner, mode) = handle.owner_and_mode();
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if owner != me {
        return Err(refused(
            dir,
            format!("it belongs to uid {owner}, not to this user (uid {me})"),
        ));
    }
    if mode & 0o002 != 0 {
        return Err(refused(
            dir,
            format!("every user may write in it (mode {mode:o}); `chmod o-w` it or choose another"),
        ));
    }
    if !handle.writable().map_err(io_err(dir))? {
        return Err(refused(dir, "this user may not write in it".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_place_is_told_apart_and_foreign_ones_are_named() {
        let root = tempfile::tempdir().unwrap();
        let at = |name: &str| root.path().join(name);
        assert_eq!(check(&at("new")).unwrap(), OutputDir::Missing);
        std::fs::create_dir(at("empty")).unwrap();
        assert_eq!(check(&at("empty")).unwrap(), OutputDir::Empty);
        std::fs::create_dir(at("foreign")).unwrap();
        std::fs::write(at("foreign/manifest.json"), "{}").unwrap();
        let e = check(&at("foreign")).unwrap_err().to_string();
        assert!(
            e.contains("holds a manifest.json that is not a ditto snapshot's"),
            "{e}"
        );
        std::fs::create_dir(at("data")).unwrap();
        for f in ["a.txt", "b.txt", "c.txt", "d.txt"] {
            std::fs::write(at("data").join(f), "x").unwrap();
        }
        let e = check(&at("data")).unwrap_err().to_string();
        assert!(
            e.contains("it holds a.txt, b.txt, c.txt and 1 more and no manifest.json"),
            "{e}"
        );
        std::fs::write(at("file"), "x").unwrap();
        let e = check(&at("file")).unwrap_err().to_string();
        assert!(e.contains("it is a file"), "{e}");
        std::os::unix::fs::symlink(at("empty"), at("link")).unwrap();
        let e = check(&at("link")).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
    }
}

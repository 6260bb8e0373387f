//! Files replaced atomically: written under a temporary name
//! (`.ditto-tmp-*`) in the same directory and renamed into place, so a
//! reader (or a crash) sees the old content or the new, never half; and
//! the leftovers a killed writer leaves (temporary files never renamed),
//! found and removed. Everything goes through the directory's handle
//! ([`DirHandle`]). Owns the temporary names; knows nothing of what the
//! files hold.

use super::dir_handle::DirHandle;
use super::error::{StoreError, io_err};
use super::journal;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` through a temporary file in the same directory
/// and a rename, so `path` is either the old or the new content; synced to
/// disk first.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| StoreError::Invalid(format!("{} names no file", path.display())))?;
    let dir = DirHandle::open(parent).map_err(io_err(parent))?;
    write_replacing_with(&dir, name, true, |w| {
        w.write_all(bytes).map_err(io_err(path))
    })
}

/// A temporary name not taken by this process (the exclusive create
/// refuses one taken by another).
fn temporary_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{TEMPORARY_PREFIX}{}-{n}-{nanos:08x}", std::process::id())
}

/// Writes what `fill` writes to `name` in `dir` through a buffer and a
/// temporary file renamed into place: a large file (the manifest of many
/// dispatches) never sits whole in memory. Synced first when `durable`.
/// When `fill` or a write fails, the temporary file is removed and `name`
/// left as it was.
pub(super) fn write_replacing_with(
    dir: &DirHandle,
    name: &str,
    durable: bool,
    fill: impl FnOnce(&mut dyn Write) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let path = dir.shown(name);
    let (tmp_name, file) = loop {
        let tmp_name = temporary_name();
        match dir.create_new(&tmp_name, 0o644) {
            Ok(f) => break (tmp_name, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(dir.path())(e)),
        }
    };
    let written = (|| {
        let mut w = std::io::BufWriter::new(&file);
        fill(&mut w)?;
        w.flush().map_err(io_err(&path))?;
        drop(w);
        if durable {
            file.sync_data().map_err(io_err(&path))?;
        }
        dir.rename(&tmp_name, name).map_err(io_err(&path))
    })();
    if written.is_err() {
        let _ = dir.remove(&tmp_name);
    }
    written
}

/// Prefix of the temporary files [`write_atomically`] renames into place.
pub(super) const TEMPORARY_PREFIX: &str = ".ditto-tmp-";

/// Whether `names` (a directory's) are all temporary files or the journal,
/// and some: what a writer killed before its first manifest leaves.
pub(super) fn only_leftovers_of_a_killed_writer(names: &[String]) -> bool {
    !names.is_empty()
        && names
            .iter()
            .all(|name| name.starts_with(TEMPORARY_PREFIX) || name == journal::JOURNAL_FILE)
}

/// Removes the temporary files and the journal of a killed writer from `dir`.
pub(super) fn remove_leftovers(dir: &DirHandle) -> Result<(), StoreError> {
    for name in dir.names().map_err(io_err(dir.path()))? {
        let name = name.to_string_lossy();
        if name.starts_with(TEMPORARY_PREFIX) || name == journal::JOURNAL_FILE {
            dir.remove_if_there(&name)
                .map_err(io_err(&dir.shown(&name)))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_whose_fill_fails_leaves_the_old_content_and_no_temporary_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("manifest.json");
        write_atomically(&path, b"old").unwrap();
        let dir = DirHandle::open(tmp.path()).unwrap();
        let err = write_replacing_with(&dir, "manifest.json", true, |w| {
            w.write_all(b"half of the new").map_err(io_err(&path))?;
            Err(StoreError::Invalid("the fill gave up".into()))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "the fill gave up");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        let names: Vec<String> = dir
            .names()
            .unwrap()
            .into_iter()
            .map(|n| n.into_string().unwrap())
            .collect();
        assert_eq!(names, ["manifest.json"]);
        assert!(!only_leftovers_of_a_killed_writer(&names));
    }
}

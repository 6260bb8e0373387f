//! Files replaced atomically: written under a temporary name
//! (`.ditto-tmp-*`) in the same directory and renamed into place, so a
//! reader (or a crash) sees the old content or the new, never half; and
//! the leftovers a killed writer leaves (temporary files never renamed),
//! found and removed. Owns the temporary names; knows nothing of what the
//! files hold.

use super::error::{StoreError, io_err};
use super::journal;
use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` through a temporary file in the same directory
/// and a rename, so `path` is either the old or the new content; synced to
/// disk first.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    write_replacing(path, &[bytes], true)
}

/// [`write_atomically`] of `parts` one after the other, synced only when
/// `durable`.
pub(super) fn write_replacing(
    path: &Path,
    parts: &[&[u8]],
    durable: bool,
) -> Result<(), StoreError> {
    write_replacing_with(path, durable, |w| {
        parts
            .iter()
            .try_for_each(|part| w.write_all(part))
            .map_err(io_err(path))
    })
}

/// [`write_replacing`] of what `fill` writes, through a buffer: a large
/// file (the manifest of many dispatches) never sits whole in memory. When
/// `fill` fails, the temporary file is removed and `path` left as it was.
pub(super) fn write_replacing_with(
    path: &Path,
    durable: bool,
    fill: impl FnOnce(&mut dyn Write) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(TEMPORARY_PREFIX)
        .tempfile_in(dir)
        .map_err(io_err(dir))?;
    {
        let mut w = std::io::BufWriter::new(tmp.as_file_mut());
        fill(&mut w)?;
        w.flush().map_err(io_err(path))?;
    }
    if durable {
        tmp.as_file().sync_data().map_err(io_err(path))?;
    }
    tmp.persist(path).map_err(|e| StoreError::Io {
        path: path.to_path_buf(),
        error: e.error,
    })?;
    Ok(())
}

/// Prefix of the temporary files [`write_atomically`] renames into place.
pub(super) const TEMPORARY_PREFIX: &str = ".ditto-tmp-";

/// Whether `dir` holds entries, all of them temporary files or the journal:
/// what a writer killed before its first manifest leaves.
pub(super) fn only_leftovers_of_a_killed_writer(dir: &Path) -> Result<bool, StoreError> {
    let mut any = false;
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let name = entry.map_err(io_err(dir))?.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with(TEMPORARY_PREFIX) || name == journal::JOURNAL_FILE) {
            return Ok(false);
        }
        any = true;
    }
    Ok(any)
}

/// Removes the temporary files and the journal of a killed writer from `dir`.
pub(super) fn remove_leftovers(dir: &Path) -> Result<(), StoreError> {
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(TEMPORARY_PREFIX) || name == journal::JOURNAL_FILE {
            let p = entry.path();
            std::fs::remove_file(&p).map_err(io_err(&p))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_whose_fill_fails_leaves_the_old_content_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("manifest.json");
        write_atomically(&path, b"old").unwrap();
        let err = write_replacing_with(&path, true, |w| {
            w.write_all(b"half of the new").map_err(io_err(&path))?;
            Err(StoreError::Invalid("the fill gave up".into()))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "the fill gave up");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["manifest.json"]);
        assert!(!only_leftovers_of_a_killed_writer(dir.path()).unwrap());
    }
}

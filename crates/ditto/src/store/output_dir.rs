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
use super::error::{StoreError, io_err};
use super::manifest::{MANIFEST_FILE, Manifest, SNAPSHOT_FORMAT};
use std::os::unix::fs::MetadataExt;
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
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(OutputDir::Missing),
        Err(e) => return Err(io_err(dir)(e)),
    };
    if meta.file_type().is_symlink() {
        return Err(refused(dir, "it is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(refused(dir, "it is a file, not a directory".into()));
    }
    // Another user who may write in the directory could plant links under
    // the names ditto writes: such a directory is never written.
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(refused(
            dir,
            format!(
                "it belongs to uid {}, not to this user (uid {me})",
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o002 != 0 {
        return Err(refused(
            dir,
            format!(
                "every user may write in it (mode {:o}); `chmod o-w` it or choose another",
                meta.mode() & 0o7777
            ),
        ));
    }
    let c_path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| refused(dir, "its name holds a NUL byte".into()))?;
    // SAFETY: a plain access(2) on a NUL-terminated path.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(refused(dir, "this user may not write in it".into()));
    }
    let manifest = dir.join(MANIFEST_FILE);
    match std::fs::symlink_metadata(&manifest) {
        Ok(m) if m.is_file() => {
            let bytes = std::fs::read(&manifest).map_err(io_err(&manifest))?;
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
        Ok(_) => {
            return Err(refused(
                dir,
                "its manifest.json is not a regular file".into(),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(&manifest)(e)),
    }
    let mut names: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        names.push(
            entry
                .map_err(io_err(dir))?
                .file_name()
                .to_string_lossy()
                .into_owned(),
        );
    }
    if names.is_empty() {
        return Ok(OutputDir::Empty);
    }
    if only_leftovers_of_a_killed_writer(dir)? {
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

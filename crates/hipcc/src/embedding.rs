//! Host-build objects carried inside hipcc's own objects, so that they
//! travel wherever the objects go (into static libraries with `ar`, into
//! the link of a program) without any file beside them to lose.
//!
//! `ditto hipcc -c` adds one section, `.ditto_host_build`, to the object
//! hipcc wrote: a frame (magic, length, bytes) holding the source's host
//! object. The section is not allocated: it takes no memory in the program
//! and changes nothing the program does. A linker concatenates the sections
//! of every object it links, so the linked program's section holds the
//! frames of all of them; but a linker pulls an archive member in only for
//! a host symbol, and device code linked with -fgpu-rdc needs none, so
//! `ditto hipcc` reads the frames from the objects and archives the link
//! is given, not from the program. The binutils it drives for that (and
//! that the host compile uses too) run through `run_tool`.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

pub const SECTION: &str = ".ditto_host_build";
const MAGIC: &[u8; 16] = b"ditto-host-obj\x01\x00";

/// One frame holding `object`.
pub fn frame(object: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(object.len() + 24);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(object.len() as u64).to_le_bytes());
    bytes.extend_from_slice(object);
    bytes
}

/// The objects of every frame in a section's bytes (a linker may pad
/// between the frames of two input objects).
pub fn unframe(section: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut objects = Vec::new();
    let mut at = 0;
    while let Some(found) = find(&section[at..], MAGIC) {
        let start = at + found + MAGIC.len();
        let Some(length) = section.get(start..start + 8) else {
            bail!("a {SECTION} frame is cut short");
        };
        let length = u64::from_le_bytes(length.try_into().expect("8 bytes")) as usize;
        let body = start + 8;
        let Some(object) = section.get(body..body.saturating_add(length)) else {
            bail!("a {SECTION} frame is cut short");
        };
        objects.push(object.to_vec());
        at = body + length;
    }
    Ok(objects)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The objcopy to use: `OBJCOPY`, else objcopy.
pub(super) fn objcopy() -> std::ffi::OsString {
    std::env::var_os("OBJCOPY").unwrap_or_else(|| "objcopy".into())
}

/// Adds the frame of `host_object` to the object file `object`.
pub fn embed(object: &Path, host_object: &[u8], scratch: &Path) -> Result<()> {
    let framed = scratch.join(format!(
        "frame-{}",
        object.file_name().unwrap_or_default().to_string_lossy()
    ));
    std::fs::write(&framed, frame(host_object))?;
    let mut section = std::ffi::OsString::from(format!("{SECTION}="));
    section.push(&framed);
    run_tool(
        Command::new(objcopy())
            .arg("--add-section")
            .arg(section)
            .arg(object),
        &format!("objcopy, adding the host build to {}", object.display()),
    )
}

/// Runs a build tool (objcopy, cc, ar) to its end; its failure, with its
/// standard error, names `what` it was doing.
pub(super) fn run_tool(command: &mut Command, what: &str) -> Result<()> {
    let output = command
        .output()
        .with_context(|| format!("cannot run {what}"))?;
    if !output.status.success() {
        bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// Adds the frame of `host_object` to the static library `archive` (what
/// `hipcc --emit-static-lib` wrote) as a member of its own: an empty object
/// whose only content is the section, so the linker never pulls it in.
pub fn add_to_archive(
    archive: &Path,
    source: &Path,
    host_object: &[u8],
    scratch: &Path,
) -> Result<()> {
    let stem = source.file_stem().unwrap_or_default().to_string_lossy();
    let member = scratch.join(format!("ditto-host-build-{stem}.o"));
    run_tool(
        Command::new("cc")
            .args(["-x", "c", "-c", "-o"])
            .arg(&member)
            .arg("/dev/null"),
        "cc, making the archive member of the host build",
    )?;
    embed(&member, host_object, scratch)?;
    let ar = std::env::var_os("AR").unwrap_or_else(|| "ar".into());
    run_tool(
        Command::new(ar).arg("rs").arg(archive).arg(&member),
        &format!("ar, adding the host build to {}", archive.display()),
    )
}

/// The host objects carried by an object file or a static library (each
/// member's section holds whole frames, so the file's bytes are scanned as
/// they are).
pub fn carried(file: &Path) -> Result<Vec<Vec<u8>>> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    unframe(&bytes)
}

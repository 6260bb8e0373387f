//! What `ditto replay` reads, loads and writes (issue 45, items 2 to 4):
//! `--emit` writes only into a directory of this user's that no other
//! user may write in, never through a link; every file replay reads (the
//! snapshot's code object, `--from`, `--kernel-object`) is a regular file
//! of bounded size, opened without blocking, the snapshot's own never a
//! link and checked against its digest; and the host build replay loads is
//! the one the capture stored (checked by digest) or one the user named,
//! never a path the manifest names. On the CPU runtime with hipcc-built
//! programs, each within a bounded time (a hang fails the test).

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// Far beyond what a refused input needs; reaching it means a hang.
const LIMIT: Duration = Duration::from_secs(60);

/// A replay capture of `reduce_sum` by reduce_sum_baseline into `out`.
fn capture(out: &Path) {
    let mut cmd = Command::new(ditto_bin());
    cmd.args([
        "run",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "reduce_sum",
        "--capture",
        "replay",
        "--out",
    ])
    .arg(out)
    .arg("--")
    .arg(hip_app("reduce_sum_baseline"));
    let o = output_within(&mut cmd, Duration::from_secs(300), "the capture");
    assert_eq!(o.status.code(), Some(0), "stderr:\n{}", stderr(&o));
}

/// `ditto replay SNAPSHOT ARGS --json` on the CPU runtime, within [`LIMIT`].
fn replay(snapshot: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(ditto_bin());
    cmd.arg("replay")
        .arg(snapshot)
        .args(["--hsa-runtime", "cpu", "--json"])
        .args(args)
        .env("NO_COLOR", "1");
    output_within(&mut cmd, LIMIT, "ditto replay")
}

/// The error of a replay that must fail with exit status 2.
fn refusal(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "stderr:\n{}", stderr(out));
    json(out)["error"].as_str().unwrap().to_string()
}

/// The snapshot's only file named `<prefix>…<suffix>`.
fn stored(snap: &Path, prefix: &str, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(snap)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(prefix) && name.ends_with(suffix)
        })
        .collect();
    assert_eq!(found.len(), 1, "{prefix}*{suffix} in {}", snap.display());
    found[0].clone()
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo of a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Rewrites the snapshot's manifest.json through `edit`.
fn edit_manifest(snap: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = snap.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut m);
    std::fs::write(&path, serde_json::to_string_pretty(&m).unwrap()).unwrap();
}

fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().next().is_none()
}

#[test]
fn emit_refuses_another_user_s_directory_an_open_one_and_links() {
    // SAFETY: geteuid cannot fail.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test hands a directory to another uid, which needs root (CI runs as root)"
    );
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    capture(&snap);
    let at = |name: &str| dir.path().join(name);
    // Another user's empty directory, and an empty one every user may write in.
    std::fs::create_dir(at("theirs")).unwrap();
    std::os::unix::fs::chown(at("theirs"), Some(65534), Some(65534)).unwrap();
    std::fs::create_dir(at("open")).unwrap();
    std::fs::set_permissions(at("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
    // A link to an empty directory, and a parent that is a link.
    std::fs::create_dir(at("target")).unwrap();
    std::os::unix::fs::symlink(at("target"), at("link")).unwrap();
    std::os::unix::fs::symlink(at("target"), at("parent-link")).unwrap();
    for (place, why) in [
        (
            at("theirs"),
            "it belongs to uid 65534, not to this user (uid 0)",
        ),
        (at("open"), "every user may write in it (mode 777)"),
        (at("link"), "it is a symbolic link"),
        (at("parent-link").join("repro"), "parent"),
    ] {
        let out = replay(&snap, &["--emit", place.to_str().unwrap()]);
        let e = refusal(&out);
        assert!(
            e.contains(why) && e.contains("--emit"),
            "{}: {e}",
            place.display()
        );
    }
    for left in ["theirs", "open", "target"] {
        assert!(is_empty_dir(&at(left)), "{left} was written in");
    }
    // A new directory: made this user's, not writable by others.
    let fine = at("fine");
    let out = replay(&snap, &["--emit", fine.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    let mode = std::fs::metadata(&fine).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o022, 0, "mode {mode:o}");
    assert!(fine.join("kernel.co").is_file());
}

#[test]
fn a_code_object_that_is_a_link_changed_or_a_fifo_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    capture(&snap);
    let code_object = stored(&snap, "code-object-", ".co");
    let name = code_object
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let original = std::fs::read(&code_object).unwrap();
    // A link to the very same bytes outside the snapshot: never followed.
    let outside = dir.path().join("outside.co");
    std::fs::write(&outside, &original).unwrap();
    std::fs::remove_file(&code_object).unwrap();
    std::os::unix::fs::symlink(&outside, &code_object).unwrap();
    let emitted = dir.path().join("emitted");
    let e = refusal(&replay(&snap, &["--emit", emitted.to_str().unwrap()]));
    assert!(e.contains(&name) && e.contains("symbolic link"), "{e}");
    assert!(!emitted.join("kernel.co").exists());
    let e = refusal(&replay(&snap, &[]));
    assert!(e.contains(&name) && e.contains("symbolic link"), "{e}");
    // One byte changed: a corrupt snapshot, naming the file.
    std::fs::remove_file(&code_object).unwrap();
    let mut changed = original.clone();
    let middle = changed.len() / 2;
    changed[middle] ^= 0x5a;
    std::fs::write(&code_object, &changed).unwrap();
    let e = refusal(&replay(&snap, &[]));
    assert!(
        e.contains("corrupt snapshot") && e.contains(&name) && e.contains("SHA-256"),
        "{e}"
    );
    // A FIFO in its place: refused, never waited on.
    std::fs::remove_file(&code_object).unwrap();
    mkfifo(&code_object);
    let e = refusal(&replay(&snap, &[]));
    assert!(e.contains(&name) && e.contains("FIFO"), "{e}");
    // Put back, it replays.
    std::fs::remove_file(&code_object).unwrap();
    std::fs::write(&code_object, &original).unwrap();
    let out = replay(&snap, &[]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
}

#[test]
fn a_replacement_that_is_a_fifo_a_device_or_too_large_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    capture(&snap);
    // 2 GiB of a sparse file: refused by its size, before a byte is read.
    let big = dir.path().join("big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let e = refusal(&replay(&snap, &["--from", big.to_str().unwrap()]));
    assert!(
        e.contains(big.to_str().unwrap()) && e.contains("more than the 1.0 GiB"),
        "{e}"
    );
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    for option in ["--from", "--kernel-object"] {
        for file in [fifo.to_str().unwrap(), "/dev/zero"] {
            let e = refusal(&replay(&snap, &[option, file]));
            assert!(
                e.contains(file) && e.contains("is not a regular file"),
                "{option} {file}: {e}"
            );
        }
    }
}

#[test]
fn the_host_build_is_the_snapshot_s_checked_copy_never_a_path_of_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    capture(&snap);
    let real_host_build = std::fs::read(hip_app("reduce_sum_baseline.host.so")).unwrap();
    // A library whose constructor leaves a mark, where an edited manifest
    // says the program was.
    let evil = dir.path().join("evil");
    std::fs::create_dir(&evil).unwrap();
    let marker = dir.path().join("constructor-ran");
    let source = evil.join("evil.c");
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n\
             __attribute__((constructor)) static void mark(void) {{\n\
               FILE* f = fopen(\"{}\", \"w\"); if (f) fclose(f);\n\
             }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let mut cc = Command::new("cc");
    cc.args(["-shared", "-fPIC", "-o"])
        .arg(evil.join("app.host.so"))
        .arg(&source);
    assert!(output_within(&mut cc, LIMIT, "cc").status.success());
    edit_manifest(&snap, |m| {
        m["runs"][0]["command_line"] = serde_json::json!([evil.join("app")]);
    });
    let out = replay(&snap, &[]);
    assert!(!marker.exists(), "the manifest's library was loaded");
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    assert_eq!(json(&out)["valid"], true);
    let emitted = dir.path().join("emitted");
    let out = replay(&snap, &["--emit", emitted.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    assert!(!marker.exists(), "the manifest's library was loaded");
    assert_eq!(
        std::fs::read(emitted.join("kernel.host.so")).unwrap(),
        real_host_build
    );
    let copy = stored(&snap, "host-build-", ".so");
    assert_eq!(std::fs::read(&copy).unwrap(), real_host_build);
    // The stored copy changed: a corrupt snapshot, naming it.
    let name = copy.file_name().unwrap().to_str().unwrap().to_string();
    let mut changed = real_host_build.clone();
    changed[100] ^= 1;
    std::fs::write(&copy, &changed).unwrap();
    let e = refusal(&replay(&snap, &[]));
    assert!(e.contains("corrupt snapshot") && e.contains(&name), "{e}");
    // No stored host build (an older snapshot): what to do, naming the
    // kernel; and with the one the user names, the replay.
    edit_manifest(&snap, |m| {
        m["runs"][0].as_object_mut().unwrap().remove("host_build");
    });
    let e = refusal(&replay(&snap, &[]));
    assert!(
        e.contains("reduce_sum(float const*, float*, int)") && e.contains("--host-build FILE"),
        "{e}"
    );
    assert!(!marker.exists(), "the manifest's library was loaded");
    let named = hip_app("reduce_sum_baseline.host.so");
    let out = replay(&snap, &["--host-build", named.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    assert_eq!(json(&out)["valid"], true);
    assert!(!marker.exists(), "the manifest's library was loaded");
}

//! What `ditto run --out DIR` leaves when DIR's place changes or fills
//! mid-run (issue 36, items 1 and 5): a directory swapped for a link by
//! the user who owns its parent is never written through, and the run
//! says so; a file system that fills leaves a snapshot whose manifest says
//! what it holds and that it is incomplete, and an error of a few lines.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `ditto run --kernel storm_fill --out OUT -- dispatch_storm COUNT`,
/// pausing after every `pause_every` dispatches (DIR/paused-N, resumed by
/// DIR/resume-N).
fn storm_run(out: &Path, count: u32, pause_every: u32, pauses: &Path) -> Command {
    let mut cmd = Command::new(ditto_bin());
    cmd.args(["run", "--kernel", "storm_fill", "--out"])
        .arg(out)
        .arg("--")
        .arg(app("dispatch_storm"))
        .arg(count.to_string())
        .args(["--sync-every", "1", "--pause-every"])
        .arg(pause_every.to_string())
        .arg("--pause-dir")
        .arg(pauses)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn an_out_directory_swapped_for_a_link_mid_run_is_never_written_through() {
    // SAFETY: geteuid cannot fail.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test makes the swap as another uid (65534), which needs root (CI runs as root)"
    );
    let root = tempfile::tempdir().unwrap();
    let base = root.path();
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The parent of --out belongs to another user; the victim is ours.
    let evil = base.join("evil");
    std::fs::create_dir(&evil).unwrap();
    std::os::unix::fs::chown(&evil, Some(65534), Some(65534)).unwrap();
    let victim = base.join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("manifest.json"), "precious\n").unwrap();
    let pauses = base.join("pauses");
    std::fs::create_dir(&pauses).unwrap();
    let out = evil.join("out");
    let run = storm_run(&out, 40, 20, &pauses).spawn().unwrap();
    wait_for(&pauses.join("paused-1"), "the application's first pause");
    // While the application is paused, the owner of evil/ renames out/
    // away and puts a link to the victim in its place.
    let swap = Command::new("sh")
        .arg("-c")
        .arg("mv out moved && ln -s \"$1\" out")
        .arg("swap")
        .arg(&victim)
        .current_dir(&evil)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(swap.status.success(), "{}", stderr(&swap));
    std::fs::write(pauses.join("resume-1"), b"").unwrap();
    wait_for(&pauses.join("paused-2"), "the application's second pause");
    std::fs::write(pauses.join("resume-2"), b"").unwrap();
    let o = run.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{} was moved or replaced while ditto wrote the snapshot into it (a symbolic link \
             now stands at its path)",
            out.display()
        )),
        "{err}"
    );
    assert!(!err.contains("captured 41"), "no success is claimed: {err}");
    // The victim is as it was.
    assert_eq!(
        std::fs::read_to_string(victim.join("manifest.json")).unwrap(),
        "precious\n"
    );
    let in_victim: Vec<_> = std::fs::read_dir(&victim)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(in_victim, ["manifest.json"]);
    // What was captured before the swap is in the directory moved away.
    let moved = evil.join("moved");
    let m = snapshot_manifest(&moved);
    let stored = m["dispatches"].as_array().unwrap().len();
    assert!(
        (21..=41).contains(&stored),
        "the warm-up and the first 20 at least: {stored}"
    );
    for d in m["dispatches"].as_array().unwrap() {
        assert!(moved.join(d["file"].as_str().unwrap()).is_file(), "{d}");
    }
}

/// `ditto compare A A` of a snapshot whose only dispatch file was replaced
/// by `replace`, within 20 s.
fn compare_with_dispatch_file(base: &Path, replace: impl FnOnce(&Path)) -> std::process::Output {
    let snap = base.join("snap");
    let o = ditto(&[
        "run",
        "--kernel",
        "scale_values<float>",
        "--out",
        snap.to_str().unwrap(),
        "--",
        app("scale_values").to_str().unwrap(),
        "float",
        "64",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let m = snapshot_manifest(&snap);
    let file = snap.join(m["dispatches"][0]["file"].as_str().unwrap());
    replace(&file);
    let s = snap.to_str().unwrap();
    output_within(
        Command::new(ditto_bin()).args(["compare", s, s]),
        Duration::from_secs(20),
        "ditto compare",
    )
}

#[test]
fn compare_refuses_a_dispatch_file_that_is_a_fifo_or_a_link_outside_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = compare_with_dispatch_file(dir.path(), |file| {
        std::fs::remove_file(file).unwrap();
        let c = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo of a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    });
    assert_eq!(fifo.status.code(), Some(2), "{}", stderr(&fifo));
    assert!(
        stderr(&fifo).contains("dispatch-0-00000.safetensors: not read: it is a FIFO"),
        "{}",
        stderr(&fifo)
    );
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside.safetensors");
    let link = compare_with_dispatch_file(dir.path(), |file| {
        std::fs::rename(file, &outside).unwrap();
        std::os::unix::fs::symlink(&outside, file).unwrap();
    });
    assert_eq!(link.status.code(), Some(2), "{}", stderr(&link));
    assert!(
        stderr(&link).contains("dispatch-0-00000.safetensors: not read: it is a symbolic link"),
        "{}",
        stderr(&link)
    );
}

/// A tmpfs of `mib` MiB mounted on a new directory, unmounted when dropped.
struct SmallFileSystem {
    dir: tempfile::TempDir,
}

impl SmallFileSystem {
    fn mount(mib: u32) -> SmallFileSystem {
        let dir = tempfile::tempdir().unwrap();
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount(8) runs");
        assert!(
            o.status.success(),
            "mounting a {mib} MiB tmpfs needs root (CI runs as root): {}",
            stderr(&o)
        );
        SmallFileSystem { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallFileSystem {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn a_full_file_system_leaves_a_manifest_saying_what_it_holds_and_that_it_is_incomplete() {
    let fs = SmallFileSystem::mount(8);
    let out = fs.path().join("out");
    let o = output_within(
        Command::new(ditto_bin())
            .args(["run", "--kernel", "storm_fill", "--out"])
            .arg(&out)
            .arg("--")
            .arg(app("dispatch_storm"))
            .arg("5000")
            .env("NO_COLOR", "1"),
        Duration::from_secs(300),
        "ditto run into a small file system",
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{}", &err[..err.len().min(4000)]);
    assert!(
        stdout(&o).contains("dispatches=5000 "),
        "the application ran to its end: {}",
        stdout(&o)
    );
    // A few lines: the first errors and how many more.
    assert!(
        err.len() < 4096,
        "{} bytes of errors: {}",
        err.len(),
        &err[..4096]
    );
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        err.contains("more errors (each dispatch's reason is under \"missing\""),
        "{err}"
    );
    // The manifest names exactly what is stored, and from where on the
    // rank's dispatches were not stored.
    let m = snapshot_manifest(&out);
    let indices: Vec<u64> = m["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["index"].as_u64().unwrap())
        .collect();
    let stored = indices.len() as u64;
    assert!(stored > 10 && stored < 5000, "{stored} stored");
    assert_eq!(indices, (0..stored).collect::<Vec<_>>());
    for d in m["dispatches"].as_array().unwrap() {
        assert!(out.join(d["file"].as_str().unwrap()).is_file(), "{d}");
    }
    let unaccounted = &m["runs"][0]["unaccounted"];
    assert_eq!(unaccounted["from_index"].as_u64(), Some(stored), "{m}");
    assert!(
        unaccounted["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("the file system of {} is full", out.display())),
        "{unaccounted}"
    );
    assert_eq!(
        m["dispatched_kernels"][0]["count"].as_u64(),
        Some(5001),
        "the Goodbye is recorded too (the warm-up and 5000): {m}"
    );
    // The room kept for the manifest is given back.
    let hidden: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "{hidden:?}");
    // inspect says it is incomplete before listing dispatches.
    let inspected = ditto(&["inspect", out.to_str().unwrap()]);
    assert_eq!(inspected.status.code(), Some(0), "{}", stderr(&inspected));
    let third_line = stdout(&inspected).lines().nth(2).unwrap_or("").to_string();
    assert!(
        third_line.starts_with(&format!(
            "incomplete: pid {} (rank 0): its dispatches from index {stored} on are unaccounted \
             (not stored: the file system of {} is full",
            m["runs"][0]["pid"],
            out.display()
        )),
        "{third_line}"
    );
}

//! The generated layouts (src/layouts.rs) against the real headers of every
//! ROCm release on this machine: Debian 12's ROCm 5.2.3 (/usr/include/hsa)
//! and the 6.4.3 and 7.2.4 of the chroots of scripts/rocm-chroot. For each,
//! a probe compiled against that hsa_api_trace.h prints the versions its
//! `HsaApiTableContainer` writes; they must be the measured release's
//! (`versions::release_tables`), and the layout they pick
//! (`versions::layout_of`, what a tool does) must hold every entry of the
//! header at the header's own offset, and nothing else, in the core, AMD
//! and image tables. A missing chroot fails, saying how to make it.

use hsa::ApiTableVersion;
use hsa::versions::{Table, layout_of, release_tables};
use std::path::{Path, PathBuf};
use std::process::Command;

/// (chroot name, None for the host, the measured release).
const RELEASES: [(Option<&str>, &str); 3] = [
    (None, "5.2.3"),
    (Some("6.4"), "6.4.3"),
    (Some("7.2"), "7.2.4"),
];

/// (table, C struct, HsaApiTableContainer member).
const TABLES: [(Table, &str, &str); 3] = [
    (Table::Core, "CoreApiTable", "core"),
    (Table::AmdExt, "AmdExtTable", "amd_ext"),
    (Table::ImageExt, "ImageExtTable", "image_ext"),
];

fn rocm_chroot() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/rocm-chroot")
}

/// Compiles `source` against the release's headers and runs it; its stdout.
fn probe(chroot: Option<&str>, dir: &Path, name: &str, source: &str) -> String {
    let src = dir.join(format!("{name}.cpp"));
    let exe = dir.join(name);
    std::fs::write(&src, source).unwrap();
    let script = format!(
        "g++ -std=c++17 -DAMD_INTERNAL_BUILD -o {exe} {src} && {exe}",
        exe = exe.display(),
        src = src.display()
    );
    let out = match chroot {
        None => Command::new("sh").args(["-c", &script]).output().unwrap(),
        Some(release) => {
            let versions = Command::new(rocm_chroot())
                .args(["versions", release])
                .output()
                .expect("run scripts/rocm-chroot");
            assert!(
                versions.status.success(),
                "the ROCm {release} chroot is missing: run `scripts/rocm-chroot create \
                 {release}` as root (scripts/install-deps does it)"
            );
            Command::new(rocm_chroot())
                .args(["run", release, "--bind-rw"])
                .arg(dir)
                .args(["--", "sh", "-c", &script])
                .output()
                .expect("run scripts/rocm-chroot")
        }
    };
    assert!(
        out.status.success(),
        "probe {name} against the headers of {chroot:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const PRELUDE: &str = "#include <hsa/hsa_api_trace.h>\n#include <cstddef>\n#include <cstdio>\n";

/// "table major minor step" for each table, as the header's container sets them.
fn container_versions(chroot: Option<&str>, dir: &Path) -> Vec<(String, ApiTableVersion)> {
    let mut src = format!("{PRELUDE}int main() {{\n  HsaApiTableContainer c;\n");
    for (_, _, member) in TABLES {
        src.push_str(&format!(
            "  std::printf(\"{member} %u %u %u\\n\", c.{member}.version.major_id, \
             c.{member}.version.minor_id, c.{member}.version.step_id);\n"
        ));
    }
    src.push_str(
        "  std::printf(\"root %u %u %u\\n\", c.root.version.major_id, \
                  c.root.version.minor_id, c.root.version.step_id);\n  return 0;\n}\n",
    );
    probe(chroot, dir, "versions", &src)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let n = |i: usize| f[i].parse::<u32>().unwrap();
            (f[0].to_string(), ApiTableVersion::new(n(1), n(2), n(3)))
        })
        .collect()
}

#[test]
fn every_release_s_headers_lay_out_the_tables_as_the_generated_layouts_say() {
    for (chroot, release) in RELEASES {
        let dir = tempfile::tempdir().unwrap();
        let versions = container_versions(chroot, dir.path());
        let measured = release_tables(release).unwrap();
        let get = |member: &str| versions.iter().find(|(m, _)| m == member).map(|(_, v)| *v);
        assert_eq!(get("root"), measured.root, "{release} root");
        assert_eq!(get("core"), measured.core, "{release} core");
        assert_eq!(get("amd_ext"), measured.amd_ext, "{release} AMD");
        assert_eq!(get("image_ext"), measured.image_ext, "{release} image");
        // Every entry the picked layout has inside the table, at the
        // header's offset; as many entries as the table has words.
        let mut src = format!("{PRELUDE}int main() {{\n");
        let mut expected = String::new();
        for (table, c_struct, member) in TABLES {
            let version = get(member).unwrap();
            let layout = layout_of(table, version).unwrap_or_else(|e| panic!("{release}: {e}"));
            let inside: Vec<(&str, u32)> = layout
                .entries
                .iter()
                .filter(|(_, at)| at + 8 <= version.minor_id)
                .copied()
                .collect();
            assert_eq!(
                inside.len() as u32,
                (version.minor_id - 16) / 8,
                "{release} {c_struct}: the layout does not cover every word"
            );
            src.push_str(&format!(
                "  std::printf(\"{c_struct} size %zu\\n\", sizeof({c_struct}));\n"
            ));
            expected.push_str(&format!("{c_struct} size {}\n", version.minor_id));
            for (entry, at) in inside {
                src.push_str(&format!(
                    "  std::printf(\"{c_struct}.{entry} %zu\\n\", offsetof({c_struct}, {entry}));\n"
                ));
                expected.push_str(&format!("{c_struct}.{entry} {at}\n"));
            }
        }
        src.push_str("  return 0;\n}\n");
        let got = probe(chroot, dir.path(), "offsets", &src);
        assert_eq!(got, expected, "{release}");
    }
}

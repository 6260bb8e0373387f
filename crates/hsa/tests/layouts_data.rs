//! The generated table layouts (src/layouts.rs) against the measured data
//! they come from (data/rocm-abi-tables.json): for every measured ROCm
//! release, the layout its tables' versions pick holds every entry of that
//! release at the measured offset and nothing the release lacks; and the
//! file is exactly what scripts/regen-table-layouts writes from the data.

use hsa::ApiTableVersion;
use hsa::versions::{Table, layout_of};
use std::path::Path;

fn data() -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/rocm-abi-tables.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

#[test]
fn every_measured_release_reads_every_entry_at_its_measured_offset() {
    let data = data();
    let versions = data["versions"].as_object().unwrap();
    assert!(versions.len() >= 14, "{} releases", versions.len());
    for (release, v) in versions {
        for (table, name, key) in [
            (Table::Core, "CoreApiTable", "core"),
            (Table::AmdExt, "AmdExtTable", "amd_ext"),
            (Table::ImageExt, "ImageExtTable", "image_ext"),
        ] {
            let container = &v["container_version"][key];
            let version = ApiTableVersion {
                major_id: container["major_id"].as_u64().unwrap() as u32,
                minor_id: container["minor_id"].as_u64().unwrap() as u32,
                step_id: container["step_id"].as_u64().unwrap() as u32,
                reserved: 0,
            };
            let layout = layout_of(table, version).unwrap_or_else(|e| panic!("{release}: {e}"));
            assert!(
                layout.releases.contains(&release.as_str()),
                "{release} {name}"
            );
            let fields = v[name]["fields"].as_object().unwrap();
            for (field, offset) in fields.iter().filter(|(f, _)| *f != "version") {
                assert_eq!(
                    layout.offset(field, version.minor_id),
                    Some(offset.as_u64().unwrap() as usize),
                    "{release} {name}.{field}"
                );
            }
            for (entry, at) in layout.entries {
                if layout.offset(entry, version.minor_id).is_some() {
                    assert_eq!(
                        fields.get(*entry).and_then(|o| o.as_u64()),
                        Some(*at as u64),
                        "{release} {name}: {entry} is not in the release"
                    );
                }
            }
        }
    }
}

#[test]
fn every_release_s_table_versions_are_the_measured_ones() {
    let data = data();
    let versions = data["versions"].as_object().unwrap();
    assert_eq!(hsa::versions::measured_releases().len(), versions.len());
    for (release, v) in versions {
        let tables = hsa::versions::release_tables(release)
            .unwrap_or_else(|| panic!("{release} has no ReleaseTables"));
        for (key, got) in [
            ("root", tables.root),
            ("core", tables.core),
            ("amd_ext", tables.amd_ext),
            ("finalizer_ext", tables.finalizer_ext),
            ("image_ext", tables.image_ext),
            ("tools", tables.tools),
            ("pc_sampling_ext", tables.pc_sampling_ext),
        ] {
            let measured = v["container_version"].get(key).map(|c| {
                ApiTableVersion::new(
                    c["major_id"].as_u64().unwrap() as u32,
                    c["minor_id"].as_u64().unwrap() as u32,
                    c["step_id"].as_u64().unwrap() as u32,
                )
            });
            assert_eq!(got, measured, "{release} {key}");
        }
    }
}

#[test]
fn the_generated_file_is_what_the_data_gives() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/regen-table-layouts");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg("--check")
        .output()
        .expect("python3 runs scripts/regen-table-layouts");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

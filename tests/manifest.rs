//! The manifest of a real capture describes itself: ditto version, command
//! line, working directory, the kernel's full signature, per dispatch its
//! kernel and duration, per buffer name, dtype and shape.

use crate::common::*;

#[test]
fn a_captured_manifest_has_duration_shape_signature_and_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let cwd = dir.path().canonicalize().unwrap();
    let out = std::process::Command::new(ditto_bin())
        .args([
            "run",
            "--hsa-runtime",
            "cpu",
            "--kernel",
            "scale_values<float>",
            "--out",
        ])
        .arg(&snap)
        .arg("--")
        .arg(app("scale_values"))
        .args(["float", "300"])
        .current_dir(&cwd)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snap.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["ditto_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        m["kernel"]["demangled"],
        "void scale_values<float>(float*, float*, float, int)"
    );
    let run = &m["runs"][0];
    assert_eq!(run["command_line"][1], "float");
    assert_eq!(run["command_line"][2], "300");
    assert_eq!(run["working_directory"], cwd.display().to_string());
    assert_eq!(run["rank_source"], "connection order");
    let d = &m["dispatches"][0];
    assert_eq!(d["kernel"]["mangled"], m["kernel"]["mangled"]);
    let ns = d["duration_ns"]
        .as_u64()
        .expect("the CPU runtime times every dispatch");
    assert!(ns > 0 && ns < 60_000_000_000, "{ns}");
    let outputs: Vec<&serde_json::Value> = d["buffers"].as_array().unwrap().iter().collect();
    assert_eq!(
        outputs.len(),
        2,
        "input and output are both non-const pointers"
    );
    for b in outputs {
        assert_eq!(b["dtype"], "float32");
        assert_eq!(
            b["shape"],
            serde_json::json!([b["elements"].as_u64().unwrap()])
        );
        assert!(b["elements"].as_u64().unwrap() >= 300);
        assert!(
            b["name"].is_null(),
            "parameter names are unknown from the mangled name"
        );
    }
}

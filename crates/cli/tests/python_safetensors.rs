//! Snapshot tensor files are what Python's `safetensors.numpy.load_file`
//! reads: a snapshot written by the collector's store is loaded by python3
//! and its values, dtypes and shapes checked there. Fails (never skips)
//! when python3, numpy or safetensors is missing: scripts/install-deps
//! installs them.

mod support;

use ditto_cli::store::{CapturedBuffer, Snapshot, SnapshotWriter};
use ditto_protocol::DType;
use half::f16;
use std::process::Command;
use support::*;

fn captured(arg: u32, dtype: DType, data: Vec<u8>) -> CapturedBuffer {
    let mut b = buffer(arg, &[arg as u8; 32], &data, 0, data.len() as u64);
    b.dtype = dtype;
    CapturedBuffer { buffer: b, data }
}

#[test]
fn python_safetensors_numpy_reads_every_snapshot_array_with_its_values() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let mut w = SnapshotWriter::create(&snap, "scale_values").unwrap();
    w.add_run(&hello("ref")).unwrap();
    let f32s: Vec<u8> = [1.5f32, -2.25, 1e30]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let i32s: Vec<u8> = [7i32, -8].iter().flat_map(|x| x.to_le_bytes()).collect();
    let f16s: Vec<u8> = [0.5f32, 3.0]
        .iter()
        .flat_map(|x| f16::from_f32(*x).to_le_bytes())
        .collect();
    let f64s: Vec<u8> = [0.1f64].iter().flat_map(|x| x.to_le_bytes()).collect();
    w.add_dispatch(
        0,
        4242,
        &dispatch(0, vec![]),
        &[
            captured(1, DType::F32, f32s),
            captured(2, DType::I32, i32s),
            captured(3, DType::F16, f16s),
            captured(4, DType::F64, f64s),
            captured(5, DType::Bytes, vec![255, 0, 9]),
        ],
    )
    .unwrap();
    let file = snap.join(&Snapshot::load(&snap).unwrap().manifest.dispatches[0].file);
    let script = r#"
import sys
try:
    import numpy
    from safetensors.numpy import load_file
except ImportError as e:
    print("missing Python module: %s" % e)
    sys.exit(3)
t = load_file(sys.argv[1])
for name in sorted(t):
    a = t[name]
    print(name, a.dtype, list(a.shape), " ".join(repr(v) for v in a.tolist()))
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run python3 ({e}): run scripts/install-deps (installs python3, numpy and safetensors)")
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python3 could not read {} with safetensors.numpy.load_file: {stdout}{}\n\
         run scripts/install-deps (it installs numpy and safetensors with pip)",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "arg1 float32 [3] 1.5 -2.25 1.0000000150474662e+30",
            "arg2 int32 [2] 7 -8",
            "arg3 float16 [2] 0.5 3.0",
            "arg4 float64 [1] 0.1",
            "arg5 uint8 [3] 255 0 9",
        ]
    );
}

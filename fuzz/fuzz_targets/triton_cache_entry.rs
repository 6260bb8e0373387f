//! A Triton cache entry is read by `ditto kernels` and inside the
//! application at a kernel's first launch: its metadata JSON and its
//! Triton IR must turn any bytes into a kernel's parameters or nothing,
//! never a panic, in memory bounded by the files' caps. The input is the
//! metadata (`k.json`), a NUL byte, then the IR (`k.ttir`); without a NUL
//! both are the whole input. The IR text also goes through the parameter
//! parser and the write analysis directly.
#![no_main]

use ditto_kernels::triton::{ir_params, pointer_writes, read_entry};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (meta, ir) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, data),
    };
    let text = String::from_utf8_lossy(ir);
    let _ = ir_params(&text, "k");
    let _ = pointer_writes(&text, "k");
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("k.json"), meta).expect("write k.json");
    std::fs::write(dir.path().join("k.ttir"), ir).expect("write k.ttir");
    let _ = read_entry(dir.path(), "k");
});

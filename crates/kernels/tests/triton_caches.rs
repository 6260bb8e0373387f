//! Triton's cache as the installed Triton (3.6.0, from
//! scripts/install-deps) writes it: the tests' Triton kernels
//! (tests/triton/kernels.py) compiled for sm_90 and for gfx942 without a
//! GPU, then read as ditto reads a program's cache: every parameter typed
//! and named, and the pointers a kernel only reads told apart from those
//! it may write.

use ditto_kernels::param_type::ParamType;
use ditto_kernels::triton;
use std::path::Path;
use std::process::Command;

/// A cache holding every test kernel compiled for `target`.
fn compiled(target: &str) -> tempfile::TempDir {
    let cache = tempfile::tempdir().unwrap();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/triton/compile_to_cache.py");
    let o = Command::new("python3")
        .arg(&script)
        .arg(cache.path())
        .arg(target)
        .arg("all")
        .output()
        .expect("run python3");
    assert!(
        o.status.success(),
        "compiling the test kernels for {target}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    cache
}

/// Each kernel's parameters as `r` (a pointer only read), `w` (a pointer
/// that may be written) or `-` (a scalar).
const EXPECTED: &[(&str, &str)] = &[
    ("scale_add_kernel", "r r w -"),
    ("offset_by", "w - -"),
    ("accumulate", "w r -"),
    ("block_copy", "r w - -"),
    ("matmul", "r r w - - -"),
    ("softmax", "w r - -"),
    ("through_helper", "r w"),
    ("choose_by_if", "w w r -"),
    // The indices are loaded and used as offsets of out: only read.
    ("scatter_add", "r r w -"),
    ("descriptor_copy", "r w - -"),
    ("attention_like", "r r r w -"),
    ("choose_by_where", "w w r -"),
    ("if_in_loop", "w r w -"),
    ("scan_and_reduce", "r w w"),
    ("inductor_in_out", "w r -"),
    // A while loop, and a spin lock in one (`while tl.atomic_cas`).
    ("while_copy", "r w -"),
    ("locked_accumulate", "w r w r r w -"),
    // What the analysis does not follow leaves every pointer written:
    // pointers read from a table (int-to-pointer).
    ("pointer_table", "w w -"),
];

#[test]
fn every_test_kernel_is_read_with_its_inputs_told_from_its_outputs_for_cuda_and_rocm() {
    for target in ["cuda", "hip"] {
        let cache = compiled(target);
        for (name, want) in EXPECTED {
            let found = triton::find(cache.path(), name);
            assert_eq!(found.len(), 1, "{name} for {target}: {found:?}");
            let kernel = &found[0];
            assert_eq!(kernel.backend, target, "{name}");
            let got: Vec<&str> = kernel
                .params
                .iter()
                .map(|(_, ty)| match ty {
                    ParamType::Pointer { is_const: true, .. } => "r",
                    ParamType::Pointer { .. } => "w",
                    _ => "-",
                })
                .collect();
            assert_eq!(got.join(" "), *want, "{name} for {target}");
            assert!(
                kernel.params.iter().all(|(n, _)| n.is_some()),
                "{name} for {target}: {:?}",
                kernel.params
            );
        }
        let scale_add = &triton::find(cache.path(), "scale_add_kernel")[0];
        let names: Vec<_> = scale_add.params.iter().map(|p| p.0.as_deref()).collect();
        assert_eq!(
            names,
            [Some("x_ptr"), Some("y_ptr"), Some("out_ptr"), Some("n")]
        );
    }
}

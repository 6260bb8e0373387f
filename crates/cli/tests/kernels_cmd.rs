//! `ditto kernels FILE` as a user runs it, on the real code objects, HIP
//! program and offload bundle under crates/kernels/tests/fixtures (built by
//! scripts/regen-code-object-fixtures): the layouts it prints are the ones
//! the tool captures, hidden arguments never listed, errors name the file.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kernels/tests/fixtures")
        .join(name)
}

fn ditto(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ditto"))
        .args(args)
        .env("DITTO_LOG", "warn")
        .output()
        .expect("ditto runs")
}

fn kernels_json(file: &Path, extra: &[&str]) -> Vec<Value> {
    kernels_json_in(file, extra, &[])
}

/// [`kernels_json`] with `env` set for ditto.
fn kernels_json_in(file: &Path, extra: &[&str], env: &[(&str, &Path)]) -> Vec<Value> {
    let mut args = vec!["kernels", file.to_str().unwrap(), "--json"];
    args.extend(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_ditto"))
        .args(&args)
        .env("DITTO_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .expect("ditto runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["file"], file.to_str().unwrap());
    v["kernels"].as_array().expect("kernels").clone()
}

fn find<'a>(kernels: &'a [Value], name: &str, target: &str) -> &'a Value {
    kernels
        .iter()
        .find(|k| k["name"] == name && k["target"] == target)
        .unwrap_or_else(|| panic!("no {name} for {target} in {kernels:#?}"))
}

/// (offset, size, kind, dtype, const, role) of every listed argument.
fn args(kernel: &Value) -> Vec<(u64, u64, String, String, bool, String)> {
    kernel["args"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, a)| {
            assert_eq!(a["index"], i as u64);
            (
                a["offset"].as_u64().unwrap(),
                a["size"].as_u64().unwrap(),
                a["kind"].as_str().unwrap().to_string(),
                a["dtype"].as_str().unwrap().to_string(),
                a["const"].as_bool().unwrap(),
                a["role"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn arg(
    offset: u64,
    size: u64,
    kind: &str,
    dtype: &str,
    is_const: bool,
    role: &str,
) -> (u64, u64, String, String, bool, String) {
    (
        offset,
        size,
        kind.into(),
        dtype.into(),
        is_const,
        role.into(),
    )
}

#[test]
fn a_hip_program_lists_every_kernel_of_both_targets_with_template_types() {
    let kernels = kernels_json(&fixture("fatbin-app"), &[]);
    let mut seen: Vec<(String, String, u64)> = kernels
        .iter()
        .map(|k| {
            (
                k["name"].as_str().unwrap().to_string(),
                k["target"].as_str().unwrap().to_string(),
                k["bundle"].as_u64().unwrap(),
            )
        })
        .collect();
    seen.sort();
    let expected: Vec<(String, String, u64)> = [
        ("scale_values<double>", "gfx1030", 0),
        ("scale_values<double>", "gfx90a", 0),
        ("scale_values<float>", "gfx1030", 0),
        ("scale_values<float>", "gfx90a", 0),
        ("vector_add_c", "gfx1030", 1),
        ("vector_add_c", "gfx90a", 1),
    ]
    .iter()
    .map(|(n, t, b)| (n.to_string(), t.to_string(), *b))
    .collect();
    assert_eq!(seen, expected);

    let float = find(&kernels, "scale_values<float>", "gfx90a");
    assert_eq!(float["symbol"], "_Z12scale_valuesIfEvPT_S1_S0_i.kd");
    assert_eq!(float["triple"], "hipv4-amdgcn-amd-amdhsa--gfx90a");
    assert_eq!(float["kernarg_segment_size"], 24);
    assert_eq!(
        args(float),
        vec![
            arg(0, 8, "pointer", "float32", false, "output"),
            arg(8, 8, "pointer", "float32", false, "output"),
            arg(16, 4, "scalar", "float32", false, "scalar"),
            arg(20, 4, "scalar", "int32", false, "scalar"),
        ]
    );
    let double = find(&kernels, "scale_values<double>", "gfx1030");
    assert_eq!(double["kernarg_segment_size"], 28);
    assert_eq!(
        args(double),
        vec![
            arg(0, 8, "pointer", "float64", false, "output"),
            arg(8, 8, "pointer", "float64", false, "output"),
            arg(16, 8, "scalar", "float64", false, "scalar"),
            arg(24, 4, "scalar", "int32", false, "scalar"),
        ]
    );
    assert_eq!(double["warning"], Value::Null);
    assert_eq!(double["error"], Value::Null);
}

#[test]
fn an_extern_c_kernel_without_arg_types_is_raw_bytes_with_a_warning() {
    let kernels = kernels_json(&fixture("fatbin-app"), &["--kernel", "vector_add_c"]);
    assert_eq!(kernels.len(), 2, "one per target");
    let k = find(&kernels, "vector_add_c", "gfx90a");
    assert_eq!(k["arg_types_applied"], false);
    assert_eq!(
        args(k),
        vec![
            arg(0, 8, "pointer", "bytes", false, "output"),
            arg(8, 8, "pointer", "bytes", false, "output"),
            arg(16, 8, "pointer", "bytes", false, "output"),
            arg(24, 4, "scalar", "bytes", false, "scalar"),
        ]
    );
    let warning = k["warning"].as_str().expect("a warning");
    assert!(warning.contains("--arg-types"), "{warning}");
}

#[test]
fn arg_types_type_the_extern_c_kernels_and_leave_cxx_kernels_alone() {
    let kernels = kernels_json(
        &fixture("fatbin-app"),
        &["--arg-types", "const f32*,const f32*,f32*,i32"],
    );
    let k = find(&kernels, "vector_add_c", "gfx1030");
    assert_eq!(k["arg_types_applied"], true);
    assert_eq!(k["warning"], Value::Null);
    assert_eq!(
        args(k),
        vec![
            arg(0, 8, "pointer", "float32", true, "input"),
            arg(8, 8, "pointer", "float32", true, "input"),
            arg(16, 8, "pointer", "float32", false, "output"),
            arg(24, 4, "scalar", "int32", false, "scalar"),
        ]
    );
    let cxx = find(&kernels, "scale_values<float>", "gfx1030");
    assert_eq!(cxx["arg_types_applied"], false);
    assert_eq!(args(cxx)[0].3, "float32");
}

#[test]
fn with_a_kernel_query_arg_types_apply_to_the_kernels_it_names_as_in_a_run() {
    let kernels = kernels_json(
        &fixture("templates-v4.co"),
        &[
            "--kernel",
            "scale_values<float>",
            "--arg-types",
            "f32*,f32*,f32,u32",
        ],
    );
    assert_eq!(kernels.len(), 1);
    assert_eq!(kernels[0]["arg_types_applied"], true);
    assert_eq!(
        args(&kernels[0])[3],
        arg(20, 4, "scalar", "uint32", false, "scalar")
    );
    // Types that do not fit the metadata: ditto could not capture it, and says why.
    let kernels = kernels_json(
        &fixture("templates-v4.co"),
        &["--kernel", "scale_values<float>", "--arg-types", "f32*,i32"],
    );
    assert_eq!(kernels[0]["args"], serde_json::json!([]));
    let error = kernels[0]["error"].as_str().expect("an error");
    assert!(
        error.contains("2 argument types for 4 arguments"),
        "{error}"
    );
}

#[test]
fn code_object_v5_hidden_arguments_are_not_listed() {
    let kernels = kernels_json(&fixture("templates-v5.co"), &[]);
    let float = find(&kernels, "scale_values<float>", "gfx90a");
    assert_eq!(float["kernarg_segment_size"], 280);
    assert_eq!(float["triple"], Value::Null);
    assert_eq!(float["bundle"], Value::Null);
    assert_eq!(
        args(float),
        vec![
            arg(0, 8, "pointer", "float32", false, "output"),
            arg(8, 8, "pointer", "float32", false, "output"),
            arg(16, 4, "scalar", "float32", false, "scalar"),
            arg(20, 4, "scalar", "int32", false, "scalar"),
        ]
    );
}

#[test]
fn a_standalone_bundle_lists_const_inputs_and_argument_names() {
    let kernels = kernels_json(
        &fixture("qualifiers-v5.hipfb"),
        &[
            "--kernel",
            "gather(int const*, double const*, double*, unsigned int)",
        ],
    );
    assert_eq!(kernels.len(), 2);
    let k = find(&kernels, "gather", "gfx90a");
    assert_eq!(
        args(k),
        vec![
            arg(0, 8, "pointer", "int32", true, "input"),
            arg(8, 8, "pointer", "float64", true, "input"),
            arg(16, 8, "pointer", "float64", false, "output"),
            arg(24, 4, "scalar", "uint32", false, "scalar"),
        ]
    );
    let names: Vec<&str> = k["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["index", "src", "dst", "n"]);
}

#[test]
fn an_extern_c_kernel_built_with_g_is_typed_from_its_dwarf() {
    let kernels = kernels_json(&fixture("extern_c-g-v4.co"), &[]);
    let k = find(&kernels, "vector_add_c", "gfx90a");
    assert_eq!(k["warning"], Value::Null);
    assert_eq!(args(k)[0], arg(0, 8, "pointer", "float32", true, "input"));
    assert_eq!(args(k)[3], arg(24, 4, "scalar", "int32", false, "scalar"));
}

#[test]
fn the_table_shows_each_kernel_with_its_target_and_arguments() {
    let file = fixture("qualifiers-v5.hipfb");
    let out = ditto(&["kernels", file.to_str().unwrap(), "--kernel", "saxpy"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2 kernels for gfx1030, gfx90a"), "{text}");
    assert!(text.contains("kernel saxpy (gfx90a, bundle 0)"), "{text}");
    assert!(
        text.contains("symbol _Z5saxpyPKfPffi.kd, kernarg segment 280 bytes"),
        "{text}"
    );
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| !l.contains("(gfx90a"))
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        vec![
            vec!["0", "0", "8", "pointer", "float32", "const", "input", "x"],
            vec!["1", "8", "8", "pointer", "float32", "-", "output", "y"],
            vec!["2", "16", "4", "scalar", "float32", "-", "scalar", "a"],
            vec!["3", "20", "4", "scalar", "int32", "-", "scalar", "n"],
        ]
    );
}

fn error_of(args: &[&str]) -> String {
    let out = ditto(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let err = error_of(&["kernels", "/nonexistent/app"]);
    assert!(
        err.contains("ditto: error: cannot read /nonexistent/app"),
        "{err}"
    );
    let out = ditto(&["kernels", "/nonexistent/app", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert!(v["error"].as_str().unwrap().contains("/nonexistent/app"));
}

#[test]
fn a_file_that_is_not_device_code_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let text = tmp.path().join("notes.txt");
    std::fs::write(&text, "not a program\n").unwrap();
    let err = error_of(&["kernels", text.to_str().unwrap()]);
    assert!(
        err.contains(&format!(
            "{}: neither an AMDGPU code object",
            text.display()
        )),
        "{err}"
    );
    // A host ELF without device code: the test binary itself.
    let me = std::env::current_exe().unwrap();
    let err = error_of(&["kernels", me.to_str().unwrap()]);
    assert!(err.contains("without a `.hip_fatbin` section"), "{err}");
    // A code object of the CPU runtime (a HIP-like test application's):
    // said what it is and what to give instead.
    let co = Path::new(env!("CARGO_BIN_EXE_ditto"))
        .parent()
        .unwrap()
        .join("apps/scale_values.co");
    let err = error_of(&["kernels", co.to_str().unwrap()]);
    assert!(
        err.contains("a code object of ditto's CPU runtime")
            && err.contains("`hipcc --genco`")
            && !err.contains("`.hip_fatbin` section"),
        "{err}"
    );
}

#[test]
fn a_compressed_bundle_is_an_error_saying_how_to_unbundle() {
    let tmp = tempfile::tempdir().unwrap();
    let mut bundle = std::fs::read(fixture("qualifiers-v5.hipfb")).unwrap();
    bundle[..4].copy_from_slice(b"CCOB");
    let file = tmp.path().join("compressed.hipfb");
    std::fs::write(&file, bundle).unwrap();
    let err = error_of(&["kernels", file.to_str().unwrap()]);
    assert!(err.contains("compressed offload bundle"), "{err}");
    assert!(err.contains("clang-offload-bundler --unbundle"), "{err}");
}

#[test]
fn a_query_naming_no_kernel_lists_the_kernels_there_are() {
    let file = fixture("templates-v4.co");
    let err = error_of(&["kernels", file.to_str().unwrap(), "--kernel", "scale"]);
    assert!(err.contains("no kernel is named `scale`"), "{err}");
    assert!(
        err.contains("its kernels: scale_values<float>, scale_values<double>"),
        "{err}"
    );
}

#[test]
fn malformed_arg_types_are_an_error_before_reading_the_file() {
    let file = fixture("extern_c-v4.co");
    let err = error_of(&[
        "kernels",
        file.to_str().unwrap(),
        "--arg-types",
        "float*,int",
    ]);
    assert!(err.contains("--arg-types entry"), "{err}");
}

/// A Triton kernel's binary, compiled for gfx942 by the installed Triton
/// (tests/triton/compile_to_cache.py): listed as a run captures it, typed
/// and named from its cache entry (the one it lies in, or one in
/// `TRITON_CACHE_DIR`), its scratch pointers raw bytes; a copy found in no
/// cache is raw bytes with the warning.
#[test]
fn a_triton_kernel_is_listed_as_its_cache_entry_types_it() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let o = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/triton/compile_to_cache.py"))
        .arg(&cache)
        .args(["hip", "scale_add_kernel"])
        .output()
        .expect("run python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let entry = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    let binary = entry.join("scale_add_kernel.hsaco");
    let copy = dir.path().join("scale_add_kernel.hsaco");
    std::fs::copy(&binary, &copy).unwrap();
    let empty = dir.path().join("empty");
    let typed = vec![
        arg(0, 8, "pointer", "float32", true, "input"),
        arg(8, 8, "pointer", "float32", true, "input"),
        arg(16, 8, "pointer", "float32", false, "output"),
        arg(24, 4, "scalar", "int32", false, "scalar"),
        arg(32, 8, "scalar", "bytes", false, "scalar"),
        arg(40, 8, "scalar", "bytes", false, "scalar"),
    ];
    for (file, cache) in [(&binary, &empty), (&copy, &cache)] {
        let kernels = kernels_json_in(file, &[], &[("TRITON_CACHE_DIR", cache)]);
        let k = find(&kernels, "scale_add_kernel", "gfx942");
        assert_eq!(args(k), typed, "{file:?}");
        assert_eq!(k["triton_entry"], entry.to_str().unwrap(), "{file:?}");
        let names: Vec<Option<&str>> = k["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                Some("x_ptr"),
                Some("y_ptr"),
                Some("out_ptr"),
                Some("n"),
                None,
                None
            ]
        );
        assert!(k["warning"].is_null(), "{k}");
    }
    let kernels = kernels_json_in(&copy, &[], &[("TRITON_CACHE_DIR", &empty)]);
    let k = find(&kernels, "scale_add_kernel", "gfx942");
    assert!(k["triton_entry"].is_null(), "{k}");
    assert_eq!(args(k)[0], arg(0, 8, "pointer", "bytes", false, "output"));
    assert!(
        k["warning"].as_str().unwrap().contains("--arg-types"),
        "{k}"
    );
}

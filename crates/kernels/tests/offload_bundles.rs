//! Finding device code objects in real HIP build outputs: the fixtures
//! fatbin-app (a stripped HIP program built by hipcc from templates.hip and
//! extern_c.hip for gfx90a and gfx1030) and qualifiers-v5.hipfb (clang's
//! standalone offload bundle), both made by scripts/regen-code-object-fixtures.
//! The layout asserted here is the one clang-15 wrote (checked by hand with
//! a hex dump: magic, u64 count, per entry u64 offset/size/triple length).

use ditto_kernels::offload_bundle::{
    BUNDLE_MAGIC, BundleError, COMPRESSED_MAGIC, parse_bundle, parse_bundles,
};
use ditto_kernels::{device_code_objects, parse_code_object};

const FATBIN_APP: &[u8] = include_bytes!("fixtures/fatbin-app");
const QUALIFIERS_HIPFB: &[u8] = include_bytes!("fixtures/qualifiers-v5.hipfb");
const TEMPLATES_V4: &[u8] = include_bytes!("fixtures/templates-v4.co");

const GFX90A: &str = "hipv4-amdgcn-amd-amdhsa--gfx90a";
const GFX1030: &str = "hipv4-amdgcn-amd-amdhsa--gfx1030";

/// (bundle, triple, kernel symbols) of every device code object.
fn inventory(bytes: &[u8]) -> Vec<(Option<usize>, Option<String>, Vec<String>)> {
    device_code_objects(bytes)
        .expect("device code objects")
        .into_iter()
        .map(|o| {
            let kernels = parse_code_object(o.bytes)
                .expect("metadata parses")
                .expect("an AMDGPU code object");
            (
                o.bundle,
                o.triple.clone(),
                kernels.into_iter().map(|k| k.symbol).collect(),
            )
        })
        .collect()
}

#[test]
fn a_hip_program_has_one_bundle_per_translation_unit_with_both_targets() {
    let scale = vec![
        "_Z12scale_valuesIfEvPT_S1_S0_i.kd".to_string(),
        "_Z12scale_valuesIdEvPT_S1_S0_i.kd".to_string(),
    ];
    let vector_add = vec!["vector_add_c.kd".to_string()];
    assert_eq!(
        inventory(FATBIN_APP),
        vec![
            (Some(0), Some(GFX1030.into()), scale.clone()),
            (Some(0), Some(GFX90A.into()), scale),
            (Some(1), Some(GFX1030.into()), vector_add.clone()),
            (Some(1), Some(GFX90A.into()), vector_add),
        ]
    );
}

#[test]
fn each_bundle_target_agrees_with_its_code_objects_metadata() {
    for object in device_code_objects(FATBIN_APP).unwrap() {
        let from_triple = object.target();
        let bare = ditto_kernels::DeviceCodeObject {
            triple: None,
            bundle: None,
            bytes: object.bytes,
        };
        assert_eq!(bare.target(), from_triple, "{:?}", object.triple);
    }
    let targets: Vec<_> = device_code_objects(FATBIN_APP)
        .unwrap()
        .iter()
        .map(|o| o.target().unwrap())
        .collect();
    assert_eq!(targets, ["gfx1030", "gfx90a", "gfx1030", "gfx90a"]);
}

#[test]
fn a_bundle_lists_its_empty_host_entry_first() {
    let (entries, len) = parse_bundle(QUALIFIERS_HIPFB).unwrap();
    let triples: Vec<&str> = entries.iter().map(|e| e.triple.as_str()).collect();
    assert_eq!(triples, ["host-x86_64-unknown-linux", GFX1030, GFX90A]);
    assert!(entries[0].bytes.is_empty());
    assert!(entries[1].bytes.starts_with(b"\x7fELF"));
    assert_eq!(len, QUALIFIERS_HIPFB.len());
    assert_eq!(parse_bundles(QUALIFIERS_HIPFB).unwrap().len(), 1);
}

#[test]
fn a_code_object_is_its_own_single_device_code_object() {
    let objects = device_code_objects(TEMPLATES_V4).unwrap();
    assert_eq!(objects.len(), 1);
    assert_eq!(
        (objects[0].bundle, objects[0].triple.as_deref()),
        (None, None)
    );
    assert_eq!(objects[0].bytes.len(), TEMPLATES_V4.len());
    assert_eq!(objects[0].target().as_deref(), Some("gfx90a"));
}

#[test]
fn a_truncated_real_bundle_names_the_entry_that_runs_past_the_end() {
    let cut = QUALIFIERS_HIPFB.len() - 100;
    let err = device_code_objects(&QUALIFIERS_HIPFB[..cut]).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, BundleError::Malformed { .. }), "{text}");
    assert!(text.contains(&format!("entry 2 (`{GFX90A}`)")), "{text}");
    assert!(text.contains(&format!("of a {cut}-byte bundle")), "{text}");
}

#[test]
fn a_program_whose_fatbin_is_compressed_says_so() {
    let mut program = FATBIN_APP.to_vec();
    let at = program
        .windows(BUNDLE_MAGIC.len())
        .position(|w| w == BUNDLE_MAGIC)
        .expect("a bundle in the program");
    program[at..at + 4].copy_from_slice(COMPRESSED_MAGIC);
    assert_eq!(
        device_code_objects(&program).unwrap_err(),
        BundleError::Compressed
    );
}

#[test]
fn a_program_whose_second_bundle_is_damaged_is_an_error_at_that_bundle() {
    let mut program = FATBIN_APP.to_vec();
    let starts: Vec<usize> = program
        .windows(BUNDLE_MAGIC.len())
        .enumerate()
        .filter(|(_, w)| *w == BUNDLE_MAGIC)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(starts.len(), 2, "two bundles");
    program[starts[1]] = b'X';
    let err = device_code_objects(&program).unwrap_err();
    // The section starts at the first bundle: the error's byte is the second
    // bundle's offset inside the section.
    assert_eq!(
        err,
        BundleError::Malformed {
            at: starts[1] - starts[0],
            detail: "no `__CLANG_OFFLOAD_BUNDLE__` magic".into()
        }
    );
}

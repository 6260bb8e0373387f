//! Argument layouts from real code objects: the fixtures under
//! tests/fixtures/ were built by Debian's hipcc (clang-15) for gfx90a with
//! scripts/regen-code-object-fixtures; the numbers asserted here are the
//! ones clang emitted (llvm-readelf-15 --notes shows the same).

use ditto_kernels::{
    CodeObjectKernel, KernelError, KernelSignature, ParamKind, parse_arg_types, parse_code_object,
};
use ditto_types::DType;

const TEMPLATES_V4: &[u8] = include_bytes!("fixtures/templates-v4.co");
const TEMPLATES_V5: &[u8] = include_bytes!("fixtures/templates-v5.co");
const QUALIFIERS_V4: &[u8] = include_bytes!("fixtures/qualifiers-v4.co");
const ARGNAMES_V5: &[u8] = include_bytes!("fixtures/qualifiers-argnames-v5.co");
const EXTERN_C_V4: &[u8] = include_bytes!("fixtures/extern_c-v4.co");
const BY_VALUE_V4: &[u8] = include_bytes!("fixtures/by_value-v4.co");
const EXTERN_C_G_V4: &[u8] = include_bytes!("fixtures/extern_c-g-v4.co");

fn kernels(bytes: &[u8]) -> Vec<CodeObjectKernel> {
    parse_code_object(bytes)
        .expect("fixture parses")
        .expect("fixture has AMDGPU metadata")
}

fn kernel(bytes: &[u8], name: &str) -> CodeObjectKernel {
    kernels(bytes)
        .into_iter()
        .find(|k| k.name == name)
        .unwrap_or_else(|| panic!("no kernel {name}"))
}

/// (offset, size, value_kind) of every argument.
fn arg_layout(k: &CodeObjectKernel) -> Vec<(u64, u64, &str)> {
    k.args
        .iter()
        .map(|a| (a.offset, a.size, a.value_kind.as_str()))
        .collect()
}

fn ptr(dtype: DType, is_const: bool) -> ParamKind {
    ParamKind::Pointer { dtype, is_const }
}

fn scalar(dtype: DType) -> ParamKind {
    ParamKind::Scalar { dtype }
}

fn kinds_offsets(sig: &KernelSignature) -> Vec<(ParamKind, u64, u64)> {
    sig.params
        .iter()
        .map(|p| (p.kind, p.offset, p.size))
        .collect()
}

#[test]
fn v4_template_kernels_have_hipcc_offsets_and_segment_sizes() {
    let all = kernels(TEMPLATES_V4);
    let mut symbols: Vec<_> = all.iter().map(|k| k.symbol.as_str()).collect();
    symbols.sort();
    assert_eq!(
        symbols,
        vec![
            "_Z12scale_valuesIdEvPT_S1_S0_i.kd",
            "_Z12scale_valuesIfEvPT_S1_S0_i.kd"
        ]
    );
    let d = kernel(TEMPLATES_V4, "_Z12scale_valuesIdEvPT_S1_S0_i");
    assert_eq!(d.kernarg_segment_size, 28);
    assert_eq!(
        arg_layout(&d),
        vec![
            (0, 8, "global_buffer"),
            (8, 8, "global_buffer"),
            (16, 8, "by_value"),
            (24, 4, "by_value")
        ]
    );
    assert_eq!(d.args[0].address_space.as_deref(), Some("global"));
    let f = kernel(TEMPLATES_V4, "_Z12scale_valuesIfEvPT_S1_S0_i");
    assert_eq!(f.kernarg_segment_size, 24);
    assert_eq!(
        arg_layout(&f),
        vec![
            (0, 8, "global_buffer"),
            (8, 8, "global_buffer"),
            (16, 4, "by_value"),
            (20, 4, "by_value")
        ]
    );
}

#[test]
fn v4_template_signature_takes_types_from_the_name_and_offsets_from_metadata() {
    let d = kernel(TEMPLATES_V4, "_Z12scale_valuesIdEvPT_S1_S0_i");
    let (sig, warning) = KernelSignature::from_metadata(&d, None).unwrap();
    assert_eq!(warning, None);
    assert_eq!(sig.name, "scale_values<double>");
    assert_eq!(
        kinds_offsets(&sig),
        vec![
            (ptr(DType::F64, false), 0, 8),
            (ptr(DType::F64, false), 8, 8),
            (scalar(DType::F64), 16, 8),
            (scalar(DType::I32), 24, 4)
        ]
    );
    assert_eq!(sig.arg_name(0), None);
}

#[test]
fn v5_adds_hidden_arguments_after_the_same_explicit_ones() {
    let d4 = kernel(TEMPLATES_V4, "_Z12scale_valuesIdEvPT_S1_S0_i");
    let d5 = kernel(TEMPLATES_V5, "_Z12scale_valuesIdEvPT_S1_S0_i");
    assert_eq!(d5.explicit_args(), d4.args.as_slice());
    let hidden = &d5.args[d5.explicit_args().len()..];
    assert!(hidden.len() >= 10, "{} hidden args", hidden.len());
    assert!(hidden.iter().all(|a| a.is_hidden()));
    assert_eq!(hidden[0].value_kind, "hidden_block_count_x");
    assert_eq!(hidden[0].offset, 32, "first hidden arg 8-aligned after 28");
    assert_eq!(d5.kernarg_segment_size, 288);
    let f5 = kernel(TEMPLATES_V5, "_Z12scale_valuesIfEvPT_S1_S0_i");
    assert_eq!(f5.kernarg_segment_size, 280);
    // The signature is the same as v4's: hidden args are not parameters.
    let (s4, _) = KernelSignature::from_metadata(&d4, None).unwrap();
    let (s5, _) = KernelSignature::from_metadata(&d5, None).unwrap();
    assert_eq!(s4.params, s5.params);
}

#[test]
fn const_and_restrict_pointers_are_inputs_and_read_only_access_is_kept() {
    let saxpy = kernel(QUALIFIERS_V4, "_Z5saxpyPKfPffi");
    assert_eq!(saxpy.args[0].access.as_deref(), Some("read_only"));
    assert_eq!(saxpy.args[1].access, None);
    let (sig, warning) = KernelSignature::from_metadata(&saxpy, None).unwrap();
    assert_eq!(warning, None);
    assert_eq!(
        kinds_offsets(&sig),
        vec![
            (ptr(DType::F32, true), 0, 8),
            (ptr(DType::F32, false), 8, 8),
            (scalar(DType::F32), 16, 4),
            (scalar(DType::I32), 20, 4)
        ]
    );
    let gather = kernel(QUALIFIERS_V4, "_Z6gatherPKiPKdPdj");
    assert_eq!(gather.kernarg_segment_size, 28);
    let (sig, _) = KernelSignature::from_metadata(&gather, None).unwrap();
    assert_eq!(
        kinds_offsets(&sig),
        vec![
            (ptr(DType::I32, true), 0, 8),
            (ptr(DType::F64, true), 8, 8),
            (ptr(DType::F64, false), 16, 8),
            (scalar(DType::U32), 24, 4)
        ]
    );
}

#[test]
fn extern_c_kernel_without_arg_types_is_raw_bytes_with_one_warning_on_how_to_type_it() {
    let k = kernel(EXTERN_C_V4, "vector_add_c");
    assert_eq!(k.symbol, "vector_add_c.kd");
    assert_eq!(k.kernarg_segment_size, 28);
    let (sig, warning) = KernelSignature::from_metadata(&k, None).unwrap();
    assert_eq!(
        kinds_offsets(&sig),
        vec![
            (ptr(DType::Bytes, false), 0, 8),
            (ptr(DType::Bytes, false), 8, 8),
            (ptr(DType::Bytes, false), 16, 8),
            (scalar(DType::Bytes), 24, 4)
        ]
    );
    let warning = warning.expect("a warning");
    assert!(warning.contains("vector_add_c"), "{warning}");
    assert!(warning.contains("raw bytes"), "{warning}");
    assert!(
        warning.contains("--arg-types 'const f32*,f32*,i32'"),
        "{warning}"
    );
}

#[test]
fn extern_c_kernel_built_with_g_is_typed_from_its_dwarf_without_a_warning() {
    let k = kernel(EXTERN_C_G_V4, "vector_add_c");
    let params = k
        .dwarf_params
        .clone()
        .expect("DWARF for vector_add_c")
        .unwrap();
    let names: Vec<_> = params.iter().map(|p| p.name.as_deref()).collect();
    assert_eq!(names, vec![Some("a"), Some("b"), Some("c"), Some("n")]);
    let (sig, warning) = KernelSignature::from_metadata(&k, None).unwrap();
    assert_eq!(warning, None);
    assert_eq!(
        kinds_offsets(&sig),
        vec![
            (ptr(DType::F32, true), 0, 8),
            (ptr(DType::F32, true), 8, 8),
            (ptr(DType::F32, false), 16, 8),
            (scalar(DType::I32), 24, 4)
        ]
    );
    // --arg-types still wins over the DWARF.
    let types = parse_arg_types("f32*,f32*,f32*,u32").unwrap();
    let (sig, _) = KernelSignature::from_metadata(&k, Some(&types)).unwrap();
    assert_eq!(sig.params[0].kind, ptr(DType::F32, false));
    assert_eq!(sig.params[3].kind, scalar(DType::U32));
    // Without -g there is no DWARF: raw bytes and the warning.
    assert_eq!(kernel(EXTERN_C_V4, "vector_add_c").dwarf_params, None);
}

#[test]
fn dwarf_sizes_that_disagree_with_the_metadata_are_refused_naming_the_argument() {
    let mut k = kernel(EXTERN_C_G_V4, "vector_add_c");
    k.args[3].size = 8;
    k.kernarg_segment_size = 32;
    let err = KernelSignature::from_metadata(&k, None).unwrap_err();
    assert!(matches!(err, KernelError::Metadata { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("vector_add_c") && msg.contains("argument 3 `n` is 4 bytes"),
        "{msg}"
    );
    let mut k = kernel(EXTERN_C_G_V4, "vector_add_c");
    k.args.pop();
    let msg = KernelSignature::from_metadata(&k, None)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("4 parameters for 3 arguments"), "{msg}");
}

#[test]
fn unreadable_dwarf_is_an_error_that_asks_for_arg_types() {
    let mut k = kernel(EXTERN_C_G_V4, "vector_add_c");
    k.dwarf_params = Some(Err(ditto_kernels::DwarfError::Malformed("test".into())));
    let err = KernelSignature::from_metadata(&k, None).unwrap_err();
    assert!(matches!(err, KernelError::Dwarf { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("vector_add_c") && msg.contains("--arg-types"),
        "{msg}"
    );
}

#[test]
fn truncated_and_bit_flipped_dwarf_never_panics() {
    for len in (0..EXTERN_C_G_V4.len()).step_by(3) {
        let _ = ditto_kernels::kernel_params(&EXTERN_C_G_V4[..len], &["vector_add_c"]);
        if let Ok(Some(kernels)) = parse_code_object(&EXTERN_C_G_V4[..len]) {
            for k in &kernels {
                let _ = KernelSignature::from_metadata(k, None);
            }
        }
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut typed = 0;
    for _ in 0..3000 {
        let mut bytes = EXTERN_C_G_V4.to_vec();
        for _ in 0..1 + rng.next() % 4 {
            let i = (rng.next() % bytes.len() as u64) as usize;
            bytes[i] ^= 1 << (rng.next() % 8);
        }
        let _ = ditto_kernels::kernel_params(&bytes, &["vector_add_c"]);
        if let Ok(Some(kernels)) = parse_code_object(&bytes) {
            for k in &kernels {
                if let Ok((_, None)) = KernelSignature::from_metadata(k, None) {
                    typed += 1;
                }
            }
        }
    }
    assert!(typed > 0, "no flipped fixture still typed from DWARF");
}

#[test]
fn extern_c_kernel_with_arg_types_is_typed_at_metadata_offsets() {
    let k = kernel(EXTERN_C_V4, "vector_add_c");
    let types = parse_arg_types("const f32*,const f32*,f32*,i32").unwrap();
    let (sig, warning) = KernelSignature::from_metadata(&k, Some(&types)).unwrap();
    assert_eq!(warning, None);
    assert_eq!(
        kinds_offsets(&sig),
        vec![
            (ptr(DType::F32, true), 0, 8),
            (ptr(DType::F32, true), 8, 8),
            (ptr(DType::F32, false), 16, 8),
            (scalar(DType::I32), 24, 4)
        ]
    );
}

#[test]
fn arg_types_that_disagree_with_the_metadata_are_refused_with_the_kernel_name() {
    let k = kernel(EXTERN_C_V4, "vector_add_c");
    let too_few = parse_arg_types("const f32*,f32*,i32").unwrap();
    let err = KernelSignature::from_metadata(&k, Some(&too_few)).unwrap_err();
    assert!(matches!(err, KernelError::Metadata { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("vector_add_c") && msg.contains("3 argument types for 4"),
        "{msg}"
    );
    let wrong_size = parse_arg_types("const f32*,const f32*,f32*,f64").unwrap();
    let msg = KernelSignature::from_metadata(&k, Some(&wrong_size))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("argument 3") && msg.contains("4 bytes"),
        "{msg}"
    );
}

#[test]
fn struct_by_value_takes_its_size_from_the_metadata() {
    let k = kernel(BY_VALUE_V4, "_Z12apply_paramsPKf6ParamsPf");
    assert_eq!(k.kernarg_segment_size, 40);
    let (sig, warning) = KernelSignature::from_metadata(&k, None).unwrap();
    assert_eq!(warning, None);
    assert_eq!(
        kinds_offsets(&sig),
        vec![
            (ptr(DType::F32, true), 0, 8),
            (scalar(DType::Bytes), 8, 24),
            (ptr(DType::F32, false), 32, 8)
        ]
    );
    // Without metadata the struct's size is unknown.
    assert!(KernelSignature::resolve("_Z12apply_paramsPKf6ParamsPf", None, Some(40)).is_err());
}

#[test]
fn kernel_arg_names_from_metadata_become_argument_names() {
    let k = kernel(ARGNAMES_V5, "_Z5saxpyPKfPffi");
    let (sig, _) = KernelSignature::from_metadata(&k, None).unwrap();
    let names: Vec<_> = (0..4).map(|i| sig.arg_name(i)).collect();
    assert_eq!(names, vec![Some("x"), Some("y"), Some("a"), Some("n")]);
    assert_eq!(sig.arg_name(4), None);
    let gather = kernel(ARGNAMES_V5, "_Z6gatherPKiPKdPdj");
    assert_eq!(
        gather
            .explicit_args()
            .iter()
            .map(|a| a.name.as_deref())
            .collect::<Vec<_>>(),
        vec![Some("index"), Some("src"), Some("dst"), Some("n")]
    );
    // Hidden args carry no source name.
    assert!(gather.args[4..].iter().all(|a| a.name.is_none()));
}

#[test]
fn explicit_args_overlapping_a_hidden_one_are_refused() {
    let mut k = kernel(TEMPLATES_V5, "_Z12scale_valuesIdEvPT_S1_S0_i");
    k.args[4].offset = 24; // first hidden arg moved onto the int
    let err = KernelSignature::from_metadata(&k, None).unwrap_err();
    assert!(err.to_string().contains("end at byte 28"), "{err}");
}

#[test]
fn a_host_elf_has_no_amdgpu_metadata_and_garbage_is_an_error() {
    let host = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    assert_eq!(parse_code_object(&host), Ok(None));
    assert!(parse_code_object(b"not an elf at all").is_err());
    assert!(parse_code_object(&[]).is_err());
}

/// A small deterministic generator (xorshift64*): the fuzz-ish tests are
/// reproducible without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn truncated_code_objects_are_errors_never_panics() {
    for fixture in [TEMPLATES_V4, TEMPLATES_V5, BY_VALUE_V4] {
        let note_len = ditto_kernels::metadata::metadata_note(fixture)
            .unwrap()
            .unwrap()
            .len();
        assert!(note_len > 0);
        for len in (0..fixture.len()).step_by(7) {
            // Every prefix must give an answer; most are errors.
            let _ = parse_code_object(&fixture[..len]);
        }
        let note = ditto_kernels::metadata::metadata_note(fixture)
            .unwrap()
            .unwrap();
        for len in 0..note.len() {
            assert!(
                ditto_kernels::metadata::parse_metadata(&note[..len]).is_err(),
                "a note truncated to {len} bytes was accepted"
            );
        }
    }
}

#[test]
fn bit_flipped_code_objects_and_notes_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for fixture in [TEMPLATES_V5, ARGNAMES_V5, EXTERN_C_V4] {
        let note = ditto_kernels::metadata::metadata_note(fixture)
            .unwrap()
            .unwrap()
            .to_vec();
        for _ in 0..2000 {
            let mut bytes = fixture.to_vec();
            let mut doc = note.clone();
            for _ in 0..1 + rng.next() % 4 {
                let i = (rng.next() % bytes.len() as u64) as usize;
                bytes[i] ^= 1 << (rng.next() % 8);
                let j = (rng.next() % doc.len() as u64) as usize;
                doc[j] ^= 1 << (rng.next() % 8);
            }
            if let Ok(Some(kernels)) = parse_code_object(&bytes) {
                for k in &kernels {
                    let _ = KernelSignature::from_metadata(k, None);
                }
            }
            if let Ok(kernels) = ditto_kernels::metadata::parse_metadata(&doc) {
                for k in &kernels {
                    let _ = KernelSignature::from_metadata(k, None);
                }
            }
        }
    }
}

//! A kernel's names: the symbol as loaded, its demangled signature, and the
//! shorter forms a user may type. Owns the splitting of a demangled
//! signature into return type, name, template arguments and parameter list;
//! never decides whether a query matches (that is `matching`).

use crate::param_type::{ParamType, parse_cxx_param};

/// Demangles an Itanium C++ symbol (`_Z…`). `None` for names that are not
/// mangled C++ (extern "C" kernels, malformed names).
pub fn demangle(mangled: &str) -> Option<String> {
    if !mangled.starts_with("_Z") {
        return None;
    }
    let symbol = cpp_demangle::Symbol::new(mangled).ok()?;
    symbol
        .demangle(&cpp_demangle::DemangleOptions::default())
        .ok()
}

/// Every form of a kernel's name that matching and reports use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelNames {
    /// Symbol name without the `.kd` suffix.
    pub mangled: String,
    /// Demangled signature (`void scale_values<float>(float*, float*, float, int)`);
    /// the mangled name itself when it is not C++.
    pub demangled: String,
    /// Demangled signature without the return type
    /// (`scale_values<float>(float*, float*, float, int)`).
    pub signature: String,
    /// Qualified name with template arguments (`scale_values<float>`, `ns::k`).
    pub name: String,
    /// `name` without its trailing template arguments (`scale_values`).
    pub base_name: String,
    /// Text between the parameter list's parentheses; `None` without C++ names.
    pub params_text: Option<String>,
}

impl KernelNames {
    /// Names of the kernel whose code-object symbol is `symbol` (a trailing
    /// `.kd`, as v3+ code objects name kernel descriptors, is dropped).
    pub fn new(symbol: &str) -> KernelNames {
        let mangled = symbol.strip_suffix(".kd").unwrap_or(symbol).to_string();
        let Some(demangled) = demangle(&mangled) else {
            return KernelNames {
                demangled: mangled.clone(),
                signature: mangled.clone(),
                name: mangled.clone(),
                base_name: mangled.clone(),
                params_text: None,
                mangled,
            };
        };
        match split_signature(&demangled) {
            Some((head, params)) => {
                let name = strip_return_type(head).to_string();
                let base_name = strip_template_args(&name).to_string();
                let signature = format!("{name}{}", &demangled[head.len()..]);
                KernelNames {
                    mangled,
                    signature,
                    name,
                    base_name,
                    params_text: Some(params.to_string()),
                    demangled,
                }
            }
            // A mangled name that is not a function (a variable): no parameters.
            None => KernelNames {
                signature: demangled.clone(),
                name: demangled.clone(),
                base_name: strip_template_args(&demangled).to_string(),
                params_text: None,
                mangled,
                demangled,
            },
        }
    }

    /// Parameter types from the demangled signature; `None` when the name
    /// carries no types (extern "C").
    pub fn param_types(&self) -> Option<Vec<ParamType>> {
        let text = self.params_text.as_deref()?;
        let parts = split_top_level(text, ',');
        if parts.len() == 1 && (parts[0].trim().is_empty() || parts[0].trim() == "void") {
            return Some(Vec::new());
        }
        Some(parts.iter().map(|p| parse_cxx_param(p)).collect())
    }
}

/// Splits `head(params)[ qualifiers]` at the parameter list: the last
/// top-level parenthesised group. Returns (head, params).
fn split_signature(demangled: &str) -> Option<(&str, &str)> {
    let bytes = demangled.as_bytes();
    let close = demangled.rfind(')')?;
    let mut depth = 0usize;
    for i in (0..=close).rev() {
        match bytes[i] {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    return Some((&demangled[..i], &demangled[i + 1..close]));
                }
            }
            _ => {}
        }
    }
    None
}

/// Drops a leading return type: everything up to the last space that is
/// outside template arguments and parentheses (`void k<unsigned int>` → `k<unsigned int>`).
fn strip_return_type(head: &str) -> &str {
    let mut depth = 0i32;
    let mut cut = 0;
    for (i, c) in head.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' => depth -= 1,
            ' ' if depth == 0 => cut = i + 1,
            _ => {}
        }
    }
    &head[cut..]
}

/// Drops trailing template arguments: `ns::k<float, 4>` → `ns::k`.
fn strip_template_args(name: &str) -> &str {
    if !name.ends_with('>') {
        return name;
    }
    let mut depth = 0i32;
    for (i, c) in name.char_indices().rev() {
        match c {
            '>' => depth += 1,
            '<' => {
                depth -= 1;
                if depth == 0 {
                    return &name[..i];
                }
            }
            _ => {}
        }
    }
    name
}

/// Splits at `sep` outside `<>`, `()` and `[]`.
pub(crate) fn split_top_level(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' => depth -= 1,
            c if c == sep && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use ditto_types::DType;

    fn ptr(dtype: DType, is_const: bool) -> ParamType {
        ParamType::Pointer { dtype, is_const }
    }
    fn scalar(dtype: DType) -> ParamType {
        ParamType::Scalar { dtype }
    }

    // The parameter types of a signature (`param_types`, each parameter
    // spelled as `param_type` reads it).
    #[test]
    fn reduce_sum_parameters_are_const_input_output_and_count() {
        let types = KernelNames::new("_Z10reduce_sumPKfPfi")
            .param_types()
            .unwrap();
        assert_eq!(
            types,
            vec![
                ptr(DType::F32, true),
                ptr(DType::F32, false),
                scalar(DType::I32)
            ]
        );
    }

    #[test]
    fn template_parameters_take_the_instantiated_element_type() {
        let f = KernelNames::new("_Z12scale_valuesIfEvPT_S1_S0_i")
            .param_types()
            .unwrap();
        assert_eq!(
            f,
            vec![
                ptr(DType::F32, false),
                ptr(DType::F32, false),
                scalar(DType::F32),
                scalar(DType::I32)
            ]
        );
        let d = KernelNames::new("_Z12scale_valuesIdEvPT_S1_S0_i")
            .param_types()
            .unwrap();
        assert_eq!(
            d,
            vec![
                ptr(DType::F64, false),
                ptr(DType::F64, false),
                scalar(DType::F64),
                scalar(DType::I32)
            ]
        );
    }

    #[test]
    fn every_demangled_scalar_spelling_maps_to_its_dtype() {
        // foo(_Float16 const*, __half*, unsigned long long*, long long*, signed char*,
        //     unsigned char*, short*, unsigned short*, unsigned int*, unsigned long*,
        //     long*, bool*, char*)
        let types = KernelNames::new("_Z3fooPKDF16_P6__halfPyPxPaPhPsPtPjPmPlPbPc")
            .param_types()
            .unwrap();
        let expected = [
            ptr(DType::F16, true),
            ptr(DType::F16, false),
            ptr(DType::U64, false),
            ptr(DType::I64, false),
            ptr(DType::I8, false),
            ptr(DType::U8, false),
            ptr(DType::I16, false),
            ptr(DType::U16, false),
            ptr(DType::U32, false),
            ptr(DType::U64, false),
            ptr(DType::I64, false),
            ptr(DType::Bool, false),
            ptr(DType::I8, false),
        ];
        assert_eq!(types, expected);
    }

    #[test]
    fn bfloat16_spellings_map_to_bf16() {
        // foo(std::bfloat16_t*, __hip_bfloat16*)
        let types = KernelNames::new("_Z3fooPDF16bP14__hip_bfloat16")
            .param_types()
            .unwrap();
        assert_eq!(
            types,
            vec![ptr(DType::BF16, false), ptr(DType::BF16, false)]
        );
        assert_eq!(parse_cxx_param("__bf16 const*"), ptr(DType::BF16, true));
    }

    #[test]
    fn template_kernel_demangles_with_its_return_type() {
        assert_eq!(
            demangle("_Z12scale_valuesIfEvPT_S1_S0_i").as_deref(),
            Some("void scale_values<float>(float*, float*, float, int)")
        );
    }

    #[test]
    fn plain_kernel_demangles_without_return_type_and_with_trailing_const() {
        assert_eq!(
            demangle("_Z10reduce_sumPKfPfi").as_deref(),
            Some("reduce_sum(float const*, float*, int)")
        );
    }

    #[test]
    fn unmangled_names_do_not_demangle() {
        assert_eq!(demangle("vector_add_c"), None);
        assert_eq!(demangle("__amd_rocclr_copyBuffer"), None);
    }

    #[test]
    fn names_of_a_template_kernel_split_into_signature_name_and_base() {
        let n = KernelNames::new("_Z12scale_valuesIfEvPT_S1_S0_i.kd");
        assert_eq!(n.mangled, "_Z12scale_valuesIfEvPT_S1_S0_i");
        assert_eq!(
            n.demangled,
            "void scale_values<float>(float*, float*, float, int)"
        );
        assert_eq!(
            n.signature,
            "scale_values<float>(float*, float*, float, int)"
        );
        assert_eq!(n.name, "scale_values<float>");
        assert_eq!(n.base_name, "scale_values");
        assert_eq!(n.params_text.as_deref(), Some("float*, float*, float, int"));
    }

    #[test]
    fn names_of_a_multi_argument_template_keep_all_arguments() {
        let n = KernelNames::new("_Z3quxIfLi256EEvPKT_PS0_i");
        assert_eq!(
            n.demangled,
            "void qux<float, 256>(float const*, float*, int)"
        );
        assert_eq!(n.name, "qux<float, 256>");
        assert_eq!(n.base_name, "qux");
        assert_eq!(n.param_types().unwrap().len(), 3);
    }

    #[test]
    fn namespaced_kernel_keeps_its_qualification() {
        let n = KernelNames::new("_ZN2ns1kEPfi");
        assert_eq!(n.demangled, "ns::k(float*, int)");
        assert_eq!(n.name, "ns::k");
        assert_eq!(n.base_name, "ns::k");
    }

    #[test]
    fn extern_c_kernel_has_only_its_symbol_name_and_no_types() {
        let n = KernelNames::new("vector_add_c.kd");
        assert_eq!(n.mangled, "vector_add_c");
        assert_eq!(n.demangled, "vector_add_c");
        assert_eq!(n.name, "vector_add_c");
        assert_eq!(n.param_types(), None);
    }

    #[test]
    fn kernel_without_parameters_has_an_empty_type_list() {
        let n = KernelNames::new("_Z4tickv");
        assert_eq!(n.demangled, "tick()");
        assert_eq!(n.param_types(), Some(vec![]));
    }

    #[test]
    fn top_level_split_ignores_commas_inside_templates() {
        assert_eq!(
            split_top_level("a<b, c>*, int", ','),
            vec!["a<b, c>*", " int"]
        );
    }
}

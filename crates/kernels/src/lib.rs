//! Kernel names and argument layouts: from a code-object symbol name to the
//! kernel's identity, whether a user's query names it, and where each
//! argument lies in the kernarg segment.
//!
//! Owns: demangling ([`names`]), exact query matching ([`matching`]),
//! parameter types from C++ spellings or `--arg-types` ([`param_type`]) and
//! natural-alignment layout ([`layout`]), extents from `--arg-sizes`
//! ([`arg_sizes`]). Pure functions over strings: no
//! FFI, no I/O, no global state.

pub mod arg_sizes;
pub mod layout;
pub mod matching;
pub mod names;
pub mod param_type;

pub use arg_sizes::ArgSizes;
pub use layout::{LayoutError, Param, ParamKind, kernarg_size, layout};
pub use matching::matches;
pub use names::{KernelNames, demangle};
pub use param_type::{ArgTypesError, ParamType, parse_arg_types, parse_cxx_param};

use ditto_protocol::KernelName;

/// A kernel with its arguments laid out: everything the tool needs to read
/// a dispatch's kernarg bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelSignature {
    /// Symbol name without `.kd`.
    pub mangled: String,
    /// Demangled signature, or the mangled name when it is not C++.
    pub demangled: String,
    /// Name with template arguments, without return type and parameters.
    pub name: String,
    pub params: Vec<Param>,
}

/// Why a kernel's argument layout is not known.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KernelError {
    #[error(
        "kernel `{kernel}` has no C++ signature (extern \"C\"?): its argument types are unknown; \
         give them with --arg-types (DITTO_ARG_TYPES), e.g. `const f32*,f32*,i32`"
    )]
    NoTypes { kernel: String },
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

impl KernelSignature {
    /// Lays out the arguments of the kernel whose symbol is `mangled`
    /// (with or without `.kd`). Types come from `arg_types` when given
    /// (the user's `--arg-types` wins), else from the demangled name.
    /// `kernarg_segment_size`, when known, must equal the layout's size.
    pub fn resolve(
        mangled: &str,
        arg_types: Option<&[ParamType]>,
        kernarg_segment_size: Option<u64>,
    ) -> Result<KernelSignature, KernelError> {
        let names = KernelNames::new(mangled);
        let types = match arg_types {
            Some(t) => t.to_vec(),
            None => names.param_types().ok_or_else(|| KernelError::NoTypes {
                kernel: names.demangled.clone(),
            })?,
        };
        let params = layout(&names.demangled, &types, kernarg_segment_size)?;
        Ok(KernelSignature {
            mangled: names.mangled,
            demangled: names.demangled,
            name: names.name,
            params,
        })
    }

    /// The protocol's identity of this kernel.
    pub fn kernel_name(&self) -> KernelName {
        KernelName {
            mangled: self.mangled.clone(),
            demangled: self.demangled.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ditto_protocol::DType;

    #[test]
    fn template_kernel_resolves_to_types_and_offsets_from_its_mangled_name() {
        let sig =
            KernelSignature::resolve("_Z12scale_valuesIdEvPT_S1_S0_i.kd", None, Some(28)).unwrap();
        assert_eq!(sig.mangled, "_Z12scale_valuesIdEvPT_S1_S0_i");
        assert_eq!(
            sig.demangled,
            "void scale_values<double>(double*, double*, double, int)"
        );
        assert_eq!(sig.name, "scale_values<double>");
        let kinds: Vec<_> = sig
            .params
            .iter()
            .map(|p| (p.kind, p.offset, p.size))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (
                    ParamKind::Pointer {
                        dtype: DType::F64,
                        is_const: false
                    },
                    0,
                    8
                ),
                (
                    ParamKind::Pointer {
                        dtype: DType::F64,
                        is_const: false
                    },
                    8,
                    8
                ),
                (ParamKind::Scalar { dtype: DType::F64 }, 16, 8),
                (ParamKind::Scalar { dtype: DType::I32 }, 24, 4),
            ]
        );
    }

    #[test]
    fn extern_c_kernel_without_arg_types_asks_for_them() {
        let err = KernelSignature::resolve("vector_add_c", None, Some(28)).unwrap_err();
        assert_eq!(
            err,
            KernelError::NoTypes {
                kernel: "vector_add_c".into()
            }
        );
        assert!(err.to_string().contains("--arg-types"));
    }

    #[test]
    fn extern_c_kernel_with_arg_types_is_laid_out_from_them() {
        let types = parse_arg_types("const f32*,const f32*,f32*,i32").unwrap();
        let sig = KernelSignature::resolve("vector_add_c", Some(&types), Some(28)).unwrap();
        assert_eq!(sig.demangled, "vector_add_c");
        assert_eq!(
            sig.params[0].kind,
            ParamKind::Pointer {
                dtype: DType::F32,
                is_const: true
            }
        );
        assert_eq!(
            sig.params[2].kind,
            ParamKind::Pointer {
                dtype: DType::F32,
                is_const: false
            }
        );
        assert_eq!((sig.params[3].offset, sig.params[3].size), (24, 4));
    }

    #[test]
    fn arg_types_override_the_demangled_types() {
        let types = parse_arg_types("const f32*,f32*,u32").unwrap();
        let sig = KernelSignature::resolve("_Z10reduce_sumPKfPfi", Some(&types), Some(20)).unwrap();
        assert_eq!(sig.params[2].kind, ParamKind::Scalar { dtype: DType::U32 });
    }

    #[test]
    fn kernarg_size_mismatch_is_reported_with_the_kernel_name() {
        let err = KernelSignature::resolve("_Z10reduce_sumPKfPfi", None, Some(24)).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("reduce_sum(float const*, float*, int)"),
            "{msg}"
        );
        assert!(msg.contains("20") && msg.contains("24"), "{msg}");
    }
}

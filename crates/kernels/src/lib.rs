//! Kernel names and argument layouts: from a code-object symbol name to the
//! kernel's identity, whether a user's query names it, and where each
//! argument lies in the kernarg segment.
//!
//! Owns: demangling ([`names`]), exact query matching ([`matching`]),
//! parameter types from C++ spellings or `--arg-types` ([`param_type`]) and
//! natural-alignment layout ([`layout`](mod@layout)), extents from `--arg-sizes`
//! ([`arg_sizes`]), AMDGPU code-object metadata ([`metadata`]) and the
//! merge of metadata offsets with demangled types (here), and where a file's
//! device code objects are ([`offload_bundle`]), and Triton kernels typed
//! from their cache entries ([`triton`]). Pure functions over strings and
//! bytes, no FFI and no global state; the one I/O is `triton`'s reading of
//! Triton's cache directories.

pub mod arg_sizes;
pub mod bundled;
pub mod dwarf;
pub mod layout;
pub mod matching;
pub mod metadata;
pub mod names;
pub mod offload_bundle;
pub mod param_type;
pub mod triton;
mod triton_ir;
mod triton_writes;
pub mod variables;

pub use arg_sizes::{ArgSizes, ArgSizesError};
pub use bundled::{BundledCodeError, BundledDeviceCode, bundled_device_code};
pub use dwarf::{DwarfError, DwarfParam, kernel_params};
pub use layout::{LayoutError, Param, ParamKind, kernarg_size, layout};
pub use matching::{KernelQuery, KernelQueryError, matches};
pub use metadata::{CodeObjectKernel, MetadataArg, MetadataError, parse_code_object};
pub use names::{KernelNames, demangle};
pub use offload_bundle::{BundleError, DeviceCodeObject, device_code_objects, elf_section};
pub use param_type::{ArgTypesError, ParamType, parse_arg_types, parse_cxx_param};
pub use triton::{TritonError, TritonKernel};
pub use variables::{
    CodeObjectVariable, VariablesError, code_object_variables, elf_function_names,
};

use ditto_types::{DType, KernelName};

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
    /// Source name of each parameter, by index, when the code object's
    /// metadata has them (`-fhip-kernel-arg-name`); empty otherwise.
    pub arg_names: Vec<Option<String>>,
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
    #[error(
        "kernel `{kernel}`: the code object's metadata does not fit its argument types: {detail}; \
         check --arg-types (DITTO_ARG_TYPES)"
    )]
    Metadata { kernel: String, detail: String },
    #[error(
        "kernel `{kernel}`: the driver's parameter layout does not fit its argument types: \
         {detail}; check --arg-types (DITTO_ARG_TYPES)"
    )]
    Driver { kernel: String, detail: String },
    #[error(
        "kernel `{kernel}`: its argument types cannot be read from the code object's DWARF: \
         {detail}; give them with --arg-types (DITTO_ARG_TYPES), e.g. `const f32*,f32*,i32`"
    )]
    Dwarf { kernel: String, detail: String },
}

/// Where a kernel's argument offsets and sizes were read, as a mismatch
/// names it.
#[derive(Clone, Copy)]
enum LayoutSource {
    /// The code object's metadata (HSA).
    Metadata,
    /// The CUDA driver's parameter layout (`cuFuncGetParamInfo`).
    Driver,
}

/// Types of an extern "C" kernel's parameters from its DWARF, checked
/// against the metadata: as many parameters as explicit arguments, each of
/// the metadata's size where the DWARF gives one.
fn dwarf_types(params: &[DwarfParam], explicit: &[MetadataArg]) -> Result<Vec<ParamType>, String> {
    if params.len() != explicit.len() {
        return Err(format!(
            "its DWARF has {} parameters for {} arguments",
            params.len(),
            explicit.len()
        ));
    }
    params
        .iter()
        .zip(explicit)
        .enumerate()
        .map(|(index, (p, arg))| match p.size {
            Some(size) if size != arg.size => Err(format!(
                "argument {index}{} is {size} bytes in its DWARF type ({:?}) but {} bytes in the metadata",
                p.name.as_deref().map(|n| format!(" `{n}`")).unwrap_or_default(),
                p.ty,
                arg.size
            )),
            _ => Ok(p.ty.clone()),
        })
        .collect()
}

/// The one warning for a kernel laid out from metadata alone (extern "C",
/// no `--arg-types`): its buffers are captured as raw bytes.
pub fn raw_bytes_warning(kernel: &str) -> String {
    format!(
        "kernel `{kernel}` has no C++ signature (extern \"C\"): its buffers are captured as raw bytes; \
         to capture typed tensors give its argument types, e.g. --arg-types 'const f32*,f32*,i32' \
         (DITTO_ARG_TYPES)"
    )
}

/// Whether a metadata argument marks its pointer as read-only: `.is_const`
/// or `.access: read_only` (clang's mark on `const T* __restrict__`).
fn metadata_says_const(arg: &MetadataArg) -> bool {
    arg.is_const || arg.access.as_deref() == Some("read_only")
}

/// The parameter types: `arg_types` (the user's `--arg-types`) when
/// given, else the demangled name's; an extern "C" kernel without them asks
/// for them.
fn given_or_named_types(
    names: &KernelNames,
    arg_types: Option<&[ParamType]>,
) -> Result<Vec<ParamType>, KernelError> {
    match arg_types {
        Some(t) => Ok(t.to_vec()),
        None => names.param_types().ok_or_else(|| KernelError::NoTypes {
            kernel: names.demangled.clone(),
        }),
    }
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
        let types = given_or_named_types(&names, arg_types)?;
        let params = layout(&names.demangled, &types, kernarg_segment_size)?;
        Ok(KernelSignature {
            mangled: names.mangled,
            demangled: names.demangled,
            name: names.name,
            params,
            arg_names: Vec::new(),
        })
    }

    /// Lays out a kernel from its code object's metadata: offsets and sizes
    /// from the metadata, element types and constness from `arg_types`
    /// (the user's `--arg-types` wins), the demangled name or, for extern
    /// "C", the code object's DWARF (`-g`); argument names from the
    /// metadata's `.name`. Without any types (extern "C", no `--arg-types`,
    /// no DWARF) every argument is raw bytes and the second value
    /// is the warning to show once. Hidden arguments are not parameters;
    /// the explicit ones must end before the first hidden one and inside
    /// the kernarg segment.
    pub fn from_metadata(
        kernel: &CodeObjectKernel,
        arg_types: Option<&[ParamType]>,
    ) -> Result<(KernelSignature, Option<String>), KernelError> {
        Self::from_args(kernel, arg_types, LayoutSource::Metadata)
    }

    /// [`KernelSignature::from_metadata`] of arguments read from `source`,
    /// which a mismatch names.
    fn from_args(
        kernel: &CodeObjectKernel,
        arg_types: Option<&[ParamType]>,
        source: LayoutSource,
    ) -> Result<(KernelSignature, Option<String>), KernelError> {
        let names = KernelNames::new(&kernel.symbol);
        let mismatch = |detail: String| KernelError::Metadata {
            kernel: names.demangled.clone(),
            detail,
        };
        let explicit = kernel.explicit_args();
        let end = explicit
            .iter()
            .map(|a| a.offset + a.size)
            .max()
            .unwrap_or(0);
        let limit = kernel.args[explicit.len()..]
            .first()
            .map_or(kernel.kernarg_segment_size, |h| h.offset);
        if end > limit || limit > kernel.kernarg_segment_size {
            return Err(mismatch(format!(
                "its explicit arguments end at byte {end}, past the first hidden argument or the \
                 {}-byte kernarg segment",
                kernel.kernarg_segment_size
            )));
        }
        let types = match (arg_types, names.param_types(), &kernel.dwarf_params) {
            (Some(t), _, _) => Some(t.to_vec()),
            (None, Some(t), _) => Some(t),
            (None, None, Some(Ok(params))) => {
                Some(dwarf_types(params, explicit).map_err(&mismatch)?)
            }
            (None, None, Some(Err(e))) => {
                return Err(KernelError::Dwarf {
                    kernel: names.demangled.clone(),
                    detail: e.to_string(),
                });
            }
            (None, None, None) => None,
        };
        let warning = types.is_none().then(|| raw_bytes_warning(&names.demangled));
        if let Some(t) = &types
            && t.len() != explicit.len()
        {
            return Err(mismatch(format!(
                "{} argument types for {} arguments",
                t.len(),
                explicit.len()
            )));
        }
        let mut params = Vec::with_capacity(explicit.len());
        // The source parameter each laid-out argument comes from (an array
        // of pointers by value is one argument per element).
        let mut sources = Vec::with_capacity(explicit.len());
        for (index, arg) in explicit.iter().enumerate() {
            let ty = types.as_ref().map(|t| &t[index]);
            let (kind, count) = match (arg.is_global_buffer(), ty) {
                (true, None) => (
                    ParamKind::Pointer {
                        dtype: DType::Bytes,
                        is_const: metadata_says_const(arg),
                    },
                    1,
                ),
                (true, Some(ParamType::Pointer { dtype, is_const })) if arg.size == 8 => (
                    ParamKind::Pointer {
                        dtype: *dtype,
                        is_const: *is_const || metadata_says_const(arg),
                    },
                    1,
                ),
                (
                    false,
                    Some(ParamType::PointerArray {
                        dtype,
                        is_const,
                        count,
                    }),
                ) if arg.size == 8 * *count as u64 => (
                    ParamKind::Pointer {
                        dtype: *dtype,
                        is_const: *is_const,
                    },
                    *count,
                ),
                // A by-value argument ditto cannot type, or a pointer it
                // is told not to follow (Triton's scratch pointers): raw
                // bytes, never captured as a buffer.
                (false, None | Some(ParamType::Unknown { .. }))
                | (true, Some(ParamType::Unknown { .. })) => (
                    ParamKind::Scalar {
                        dtype: DType::Bytes,
                    },
                    1,
                ),
                (false, Some(ParamType::Scalar { dtype })) if dtype.size() as u64 == arg.size => {
                    (ParamKind::Scalar { dtype: *dtype }, 1)
                }
                (_, Some(ty)) => {
                    return Err(mismatch(match source {
                        LayoutSource::Metadata => format!(
                            "argument {index} is `{}` of {} bytes in the metadata but typed {ty:?}",
                            arg.value_kind, arg.size
                        ),
                        LayoutSource::Driver => format!(
                            "parameter {index} is {} bytes in the driver's layout but typed {ty:?}",
                            arg.size
                        ),
                    }));
                }
            };
            let size = arg.size / count as u64;
            for element in 0..count {
                params.push(Param {
                    index: params.len() as u32,
                    kind,
                    offset: arg.offset + element as u64 * size,
                    size,
                });
                sources.push((index, (count > 1).then_some(element)));
            }
        }
        // The metadata's names (`-fhip-kernel-arg-name`), else the DWARF's
        // (`-g`) when it has a parameter for each argument.
        let dwarf_names: Option<Vec<Option<String>>> = match &kernel.dwarf_params {
            Some(Ok(params)) if params.len() == explicit.len() => {
                Some(params.iter().map(|p| p.name.clone()).collect())
            }
            _ => None,
        };
        let arg_names = sources
            .iter()
            .map(|&(i, element)| {
                let name = explicit[i]
                    .name
                    .clone()
                    .or_else(|| dwarf_names.as_ref().and_then(|names| names[i].clone()))?;
                Some(match element {
                    Some(e) => format!("{name}[{e}]"),
                    None => name,
                })
            })
            .collect();
        Ok((
            KernelSignature {
                mangled: names.mangled,
                demangled: names.demangled,
                name: names.name,
                params,
                arg_names,
            },
            warning,
        ))
    }

    /// Lays out a CUDA kernel from the driver's parameter layout (each
    /// parameter's offset and size, `cuFuncGetParamInfo`): types from
    /// `arg_types` or the demangled name; a parameter passed by value of a
    /// type ditto does not know (a functor, a struct) is raw bytes of the
    /// driver's size, and an array of pointers by value (`std::array<char*,
    /// N>`) one pointer argument per element. Without types (extern "C",
    /// no `--arg-types`) it asks for them.
    pub fn from_driver_layout(
        symbol: &str,
        layout: &[(u64, u64)],
        arg_types: Option<&[ParamType]>,
    ) -> Result<KernelSignature, KernelError> {
        let names = KernelNames::new(symbol);
        let types = given_or_named_types(&names, arg_types)?;
        let driver = |detail: String| KernelError::Driver {
            kernel: names.demangled.clone(),
            detail,
        };
        if types.len() != layout.len() {
            return Err(driver(format!(
                "{} argument types for the {} parameters the driver reports ({layout:?}, offset \
                 and size)",
                types.len(),
                layout.len()
            )));
        }
        let args = layout
            .iter()
            .zip(&types)
            .map(|(&(offset, size), ty)| MetadataArg {
                offset,
                size,
                value_kind: match ty {
                    ParamType::Pointer { .. } => "global_buffer",
                    _ => "by_value",
                }
                .to_string(),
                address_space: None,
                name: None,
                access: None,
                is_const: false,
            })
            .collect();
        let kernel = CodeObjectKernel {
            name: names.mangled.clone(),
            symbol: names.mangled.clone(),
            kernarg_segment_size: layout.iter().map(|(o, s)| o + s).max().unwrap_or(0),
            args,
            dwarf_params: None,
        };
        match KernelSignature::from_args(&kernel, Some(&types), LayoutSource::Driver) {
            Ok((sig, _)) => Ok(sig),
            Err(KernelError::Metadata { detail, .. }) => Err(driver(detail)),
            Err(e) => Err(e),
        }
    }

    /// The layout ditto captures for the kernel whose code-object symbol is
    /// `symbol`: from its code object's `metadata` entry when there is one
    /// ([`KernelSignature::from_metadata`]), else from its name alone
    /// against the runtime's `kernarg_size` ([`KernelSignature::resolve`]).
    /// The tool (at executable freeze) and `ditto kernels` both call this,
    /// so a listing shows exactly what a run captures. The second value is
    /// a warning to show once (extern "C" captured as raw bytes).
    pub fn for_capture(
        symbol: &str,
        kernarg_size: u64,
        arg_types: Option<&[ParamType]>,
        metadata: Option<&CodeObjectKernel>,
    ) -> Result<(KernelSignature, Option<String>), KernelError> {
        match metadata {
            Some(kernel) => KernelSignature::from_metadata(kernel, arg_types),
            None => KernelSignature::resolve(symbol, arg_types, Some(kernarg_size))
                .map(|sig| (sig, None)),
        }
    }

    /// Names the parameters the layout left unnamed from `names`, one per
    /// laid-out parameter (as Triton's IR gives them); a parameter already
    /// named keeps its name, and names of another count are ignored.
    pub fn name_unnamed(&mut self, names: &[Option<String>]) {
        if names.len() != self.params.len() {
            return;
        }
        self.arg_names.resize(self.params.len(), None);
        for (slot, name) in self.arg_names.iter_mut().zip(names) {
            if slot.is_none() {
                slot.clone_from(name);
            }
        }
    }

    /// The source name of parameter `index`, when the metadata had one.
    pub fn arg_name(&self, index: u32) -> Option<&str> {
        self.arg_names.get(index as usize)?.as_deref()
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

    /// PyTorch's `at::native::vectorized_elementwise_kernel<4,
    /// at::native::FillFunctor<float>, std::array<char*, 1ul>>(int,
    /// FillFunctor<float>, std::array<char*, 1ul>)`, and a binary one whose
    /// array holds the output and two inputs.
    const FILL: &str = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_";
    const MUL: &str = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13BinaryFunctorIfffNS0_15binary_internal10MulFunctorIfEEEESt5arrayIPcLm3EEEEviT0_T1_";

    #[test]
    fn a_cuda_kernel_takes_the_driver_s_sizes_for_what_its_name_cannot_size() {
        let sig = KernelSignature::from_driver_layout(FILL, &[(0, 4), (4, 4), (8, 8)], None)
            .expect("laid out");
        let laid: Vec<_> = sig
            .params
            .iter()
            .map(|p| (p.index, p.kind, p.offset, p.size))
            .collect();
        assert_eq!(
            laid,
            vec![
                (0, ParamKind::Scalar { dtype: DType::I32 }, 0, 4),
                (
                    1,
                    ParamKind::Scalar {
                        dtype: DType::Bytes
                    },
                    4,
                    4
                ),
                (
                    2,
                    ParamKind::Pointer {
                        dtype: DType::Bytes,
                        is_const: false
                    },
                    8,
                    8
                ),
            ]
        );
        // Three pointers in one array: three pointer arguments.
        let sig = KernelSignature::from_driver_layout(MUL, &[(0, 4), (4, 1), (8, 24)], None)
            .expect("laid out");
        let pointers: Vec<_> = sig
            .params
            .iter()
            .filter(|p| matches!(p.kind, ParamKind::Pointer { .. }))
            .map(|p| (p.index, p.offset))
            .collect();
        assert_eq!(pointers, vec![(2, 8), (3, 16), (4, 24)]);
        // The driver's layout and the name disagree: said, naming both.
        let err = KernelSignature::from_driver_layout(FILL, &[(0, 4), (8, 8)], None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("3 argument types for the 2 parameters the driver reports"),
            "{err}"
        );
        let err = KernelSignature::from_driver_layout(FILL, &[(0, 4), (4, 4), (8, 16)], None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("the driver's parameter layout"), "{err}");
        assert!(
            err.contains("parameter 2 is 16 bytes in the driver's layout but typed"),
            "{err}"
        );
        assert!(!err.contains("metadata"), "{err}");
        // extern "C" without --arg-types: asks for them.
        assert!(matches!(
            KernelSignature::from_driver_layout("scale_add", &[(0, 8)], None),
            Err(KernelError::NoTypes { .. })
        ));
    }

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

//! Where each argument lies in the kernarg segment: natural alignment in
//! declaration order, as hipcc lays out explicit kernel arguments. Owns the
//! offsets and the check against the segment size the runtime reports;
//! never guesses a size it does not know.

use crate::param_type::ParamType;
use ditto_types::DType;

/// What an argument is, once laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// A pointer; const pointers are inputs, the others outputs.
    Pointer {
        dtype: DType,
        is_const: bool,
    },
    Scalar {
        dtype: DType,
    },
}

/// One argument with its place in the kernarg bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    /// Position in the parameter list, from 0.
    pub index: u32,
    pub kind: ParamKind,
    pub offset: u64,
    pub size: u64,
}

impl Param {
    /// Reads this argument from a dispatch's kernarg bytes as a pointer
    /// value; `None` for scalars or when the bytes are too short.
    pub fn read_pointer(&self, kernarg: &[u8]) -> Option<u64> {
        let ParamKind::Pointer { .. } = self.kind else {
            return None;
        };
        let start = self.offset as usize;
        let bytes = kernarg.get(start..start + 8)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }
}

/// Why a layout could not be computed or does not fit the runtime's facts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error(
        "kernel `{kernel}`: argument {index} (`{spelling}`) is passed by value and its size is unknown; \
         give every argument's type with --arg-types (DITTO_ARG_TYPES)"
    )]
    UnknownSize {
        kernel: String,
        index: u32,
        spelling: String,
    },
    #[error(
        "kernel `{kernel}`: its arguments take {computed} bytes by natural alignment, but the code \
         object's kernarg segment is {segment} bytes; the argument types are wrong or incomplete \
         (check --arg-types / DITTO_ARG_TYPES)"
    )]
    SizeMismatch {
        kernel: String,
        computed: u64,
        segment: u64,
    },
}

/// Lays out `types` in declaration order at natural alignment (pointers
/// 8 bytes aligned to 8, scalars their size aligned to their size). The
/// layout's size is the end of the last argument. When the runtime's
/// `kernarg_segment_size` is given it must be equal: a difference means the
/// types are wrong, and capturing with wrong offsets would read garbage.
pub fn layout(
    kernel: &str,
    types: &[ParamType],
    kernarg_segment_size: Option<u64>,
) -> Result<Vec<Param>, LayoutError> {
    let mut params = Vec::with_capacity(types.len());
    let mut end = 0u64;
    for (position, ty) in types.iter().enumerate() {
        // (kind, size, how many): an array of pointers is that many pointer
        // arguments, numbered on from its own position.
        let (kind, size, count) = match ty {
            ParamType::Pointer { dtype, is_const } => (
                ParamKind::Pointer {
                    dtype: *dtype,
                    is_const: *is_const,
                },
                8,
                1,
            ),
            ParamType::PointerArray {
                dtype,
                is_const,
                count,
            } => (
                ParamKind::Pointer {
                    dtype: *dtype,
                    is_const: *is_const,
                },
                8,
                *count,
            ),
            ParamType::Scalar { dtype } => {
                (ParamKind::Scalar { dtype: *dtype }, dtype.size() as u64, 1)
            }
            ParamType::Unknown { spelling } => {
                return Err(LayoutError::UnknownSize {
                    kernel: kernel.to_string(),
                    index: position as u32,
                    spelling: spelling.clone(),
                });
            }
        };
        for _ in 0..count {
            let offset = end.next_multiple_of(size);
            params.push(Param {
                index: params.len() as u32,
                kind,
                offset,
                size,
            });
            end = offset + size;
        }
    }
    if let Some(segment) = kernarg_segment_size
        && segment != end
    {
        return Err(LayoutError::SizeMismatch {
            kernel: kernel.to_string(),
            computed: end,
            segment,
        });
    }
    Ok(params)
}

/// Bytes the arguments of `params` take: the end of the last one.
pub fn kernarg_size(params: &[Param]) -> u64 {
    params.last().map_or(0, |p| p.offset + p.size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param_type::parse_arg_types;

    fn offsets(params: &[Param]) -> Vec<(u64, u64)> {
        params.iter().map(|p| (p.offset, p.size)).collect()
    }

    #[test]
    fn scale_values_double_matches_hipcc_offsets_and_segment_size() {
        let types = parse_arg_types("f64*,f64*,f64,i32").unwrap();
        let params = layout("scale_values<double>", &types, Some(28)).unwrap();
        assert_eq!(offsets(&params), vec![(0, 8), (8, 8), (16, 8), (24, 4)]);
        assert_eq!(kernarg_size(&params), 28);
    }

    #[test]
    fn small_scalars_pad_before_a_pointer() {
        let types = parse_arg_types("i32,f32*,u8,f16,i64").unwrap();
        let params = layout("k", &types, None).unwrap();
        assert_eq!(
            offsets(&params),
            vec![(0, 4), (8, 8), (16, 1), (18, 2), (24, 8)]
        );
        assert_eq!(
            params.iter().map(|p| p.index).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
    }

    #[test]
    fn segment_size_mismatch_names_kernel_and_both_sizes() {
        let types = parse_arg_types("f32*,i32").unwrap();
        let err = layout("k(float*, int)", &types, Some(16)).unwrap_err();
        assert_eq!(
            err,
            LayoutError::SizeMismatch {
                kernel: "k(float*, int)".into(),
                computed: 12,
                segment: 16
            }
        );
    }

    #[test]
    fn by_value_struct_has_no_layout() {
        let types = vec![
            ParamType::Pointer {
                dtype: DType::F32,
                is_const: false,
            },
            ParamType::Unknown {
                spelling: "Params".into(),
            },
        ];
        let err = layout("k(float*, Params)", &types, None).unwrap_err();
        assert!(matches!(err, LayoutError::UnknownSize { index: 1, .. }));
        assert!(err.to_string().contains("Params"));
    }

    #[test]
    fn pointer_values_are_read_little_endian_at_their_offset() {
        let types = parse_arg_types("i32,f32*").unwrap();
        let params = layout("k", &types, Some(16)).unwrap();
        let mut kernarg = vec![0u8; 16];
        kernarg[8..16].copy_from_slice(&0x7f00_1234_5678u64.to_le_bytes());
        assert_eq!(params[1].read_pointer(&kernarg), Some(0x7f00_1234_5678));
        assert_eq!(params[0].read_pointer(&kernarg), None);
        assert_eq!(params[1].read_pointer(&kernarg[..12]), None);
    }
}

//! Parameter types of a kernel, from the demangled C++ spelling of each
//! parameter or from the user's `--arg-types` list. Owns the mapping of
//! type spellings to element types; never computes offsets (`layout` does).

use ditto_types::DType;

/// Type of one kernel parameter as far as ditto needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamType {
    /// A pointer; `dtype` is `Bytes` when the pointee is not a known scalar.
    /// `is_const`: pointer to const, i.e. an input.
    Pointer { dtype: DType, is_const: bool },
    /// A scalar passed by value.
    Scalar { dtype: DType },
    /// An array of `count` pointers passed by value: `std::array<T*, N>` or
    /// PyTorch's `at::detail::Array<T*, N>`, as PyTorch's elementwise
    /// kernels take their tensors' data. Each element is a pointer
    /// argument of its own; `char*` (type-erased data) is raw bytes.
    PointerArray {
        dtype: DType,
        is_const: bool,
        count: u32,
    },
    /// Passed by value, of a type whose size ditto does not know (a struct,
    /// an enum, a class template…): the layout cannot be computed.
    Unknown { spelling: String },
}

/// Qualifiers that may follow a type or a pointer's `*` in a demangled name.
const QUALIFIERS: [&str; 5] = [
    "const",
    "volatile",
    "__restrict__",
    "__restrict",
    "restrict",
];

/// Element type of a C++ scalar spelling as cpp_demangle prints it (plus the
/// common typedef spellings, should a signature carry them).
fn scalar_dtype(spelling: &str) -> Option<DType> {
    Some(match spelling {
        "float" => DType::F32,
        "double" => DType::F64,
        "_Float16" | "__half" | "half" | "__fp16" => DType::F16,
        "__hip_bfloat16" | "hip_bfloat16" | "bfloat16" | "__bf16" | "std::bfloat16_t" => {
            DType::BF16
        }
        "char" | "signed char" | "int8_t" => DType::I8,
        "unsigned char" | "uint8_t" => DType::U8,
        "short" | "int16_t" => DType::I16,
        "unsigned short" | "uint16_t" => DType::U16,
        "int" | "int32_t" => DType::I32,
        "unsigned int" | "uint32_t" => DType::U32,
        "long" | "long long" | "int64_t" => DType::I64,
        "unsigned long" | "unsigned long long" | "uint64_t" | "size_t" => DType::U64,
        "bool" => DType::Bool,
        _ => return None,
    })
}

/// Removes qualifier words anywhere at the top level of `spelling`
/// (`float const` → `float`, `const float` → `float`) and reports whether
/// `const` was among them.
fn strip_qualifiers(spelling: &str) -> (String, bool) {
    let mut is_const = false;
    let words: Vec<&str> = spelling
        .split_whitespace()
        .filter(|w| {
            if *w == "const" {
                is_const = true;
            }
            !QUALIFIERS.contains(w)
        })
        .collect();
    (words.join(" "), is_const)
}

/// Type of one parameter from its demangled spelling, e.g. `float const*`,
/// `double*`, `int`, `float* __restrict`.
pub fn parse_cxx_param(spelling: &str) -> ParamType {
    let mut s = spelling.trim();
    // Qualifiers of the parameter itself (`float* const`) do not matter.
    loop {
        let before = s;
        for q in QUALIFIERS {
            if let Some(rest) = s.strip_suffix(q)
                && rest.ends_with([' ', '*'])
            {
                s = rest.trim_end();
            }
        }
        if s == before {
            break;
        }
    }
    if let Some(pointee) = s.strip_suffix('*') {
        let (pointee, is_const) = strip_qualifiers(pointee);
        let dtype = scalar_dtype(&pointee).unwrap_or(DType::Bytes);
        return ParamType::Pointer { dtype, is_const };
    }
    let (value, _) = strip_qualifiers(s);
    if let Some(array) = pointer_array(&value) {
        return array;
    }
    match scalar_dtype(&value) {
        Some(dtype) => ParamType::Scalar { dtype },
        None => ParamType::Unknown {
            spelling: spelling.trim().to_string(),
        },
    }
}

/// `std::array<T*, N>` / `at::detail::Array<T*, N>` (N as the demangler
/// writes it: `3`, `3ul`, `(unsigned long)3`) as a [`ParamType::PointerArray`].
fn pointer_array(spelling: &str) -> Option<ParamType> {
    let inner = ["std::array<", "at::detail::Array<"]
        .iter()
        .find_map(|p| spelling.strip_prefix(p))?
        .strip_suffix('>')?;
    // The comma between element type and count: the last one outside
    // template arguments and parentheses.
    let mut depth = 0i32;
    let mut comma = None;
    for (i, c) in inner.char_indices() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            ',' if depth == 0 => comma = Some(i),
            _ => {}
        }
    }
    let (element, count) = inner.split_at(comma?);
    let count = count[1..].trim();
    let count = count
        .strip_prefix("(unsigned long)")
        .or_else(|| count.strip_prefix("(unsigned long long)"))
        .unwrap_or(count)
        .trim_end_matches(['u', 'l', 'U', 'L']);
    let count: u32 = count.parse().ok().filter(|&n| n > 0)?;
    let ParamType::Pointer { dtype, is_const } = parse_cxx_param(element) else {
        return None;
    };
    // char* in such an array is type-erased data, not text or int8.
    let dtype = if strip_qualifiers(element.trim().trim_end_matches('*')).0 == "char" {
        DType::Bytes
    } else {
        dtype
    };
    Some(ParamType::PointerArray {
        dtype,
        is_const,
        count,
    })
}

/// Why a `--arg-types` list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgTypesError {
    #[error(
        "--arg-types entry {position} `{entry}` is not a type: use one of \
         f16 bf16 f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool, with `*` for a pointer \
         and `const ` before a pointer that is only read, e.g. `const f32*,f32*,i32`"
    )]
    Unknown { position: usize, entry: String },
    #[error(
        "--arg-types entry {position} `{entry}`: `const` applies to pointers only (write `const {rest}*`?)"
    )]
    ConstScalar {
        position: usize,
        entry: String,
        rest: String,
    },
}

/// Element type named by a `--arg-types` token.
fn short_dtype(token: &str) -> Option<DType> {
    Some(match token {
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        "f32" => DType::F32,
        "f64" => DType::F64,
        "i8" => DType::I8,
        "i16" => DType::I16,
        "i32" => DType::I32,
        "i64" => DType::I64,
        "u8" => DType::U8,
        "u16" => DType::U16,
        "u32" => DType::U32,
        "u64" => DType::U64,
        "bool" => DType::Bool,
        _ => return None,
    })
}

/// Parses `--arg-types` (`DITTO_ARG_TYPES`): a comma-separated list such as
/// `const f32*,f32*,f32,i32`. Positions in errors count from 0, like
/// argument indices.
pub fn parse_arg_types(list: &str) -> Result<Vec<ParamType>, ArgTypesError> {
    list.split(',')
        .enumerate()
        .map(|(position, raw)| {
            let entry = raw.trim();
            let unknown = || ArgTypesError::Unknown {
                position,
                entry: entry.to_string(),
            };
            let (is_const, rest) = match entry.strip_prefix("const ") {
                Some(rest) => (true, rest.trim()),
                None => (false, entry),
            };
            match rest.strip_suffix('*') {
                Some(elem) => {
                    let dtype = short_dtype(elem.trim()).ok_or_else(unknown)?;
                    Ok(ParamType::Pointer { dtype, is_const })
                }
                None => {
                    let dtype = short_dtype(rest).ok_or_else(unknown)?;
                    if is_const {
                        return Err(ArgTypesError::ConstScalar {
                            position,
                            entry: entry.to_string(),
                            rest: rest.to_string(),
                        });
                    }
                    Ok(ParamType::Scalar { dtype })
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_of_pointers_by_value_are_pointer_arrays_and_other_templates_unknown() {
        let bytes = |count, is_const| ParamType::PointerArray {
            dtype: DType::Bytes,
            is_const,
            count,
        };
        assert_eq!(
            parse_cxx_param("std::array<char*, (unsigned long)1>"),
            bytes(1, false)
        );
        assert_eq!(parse_cxx_param("std::array<char*, 3ul>"), bytes(3, false));
        assert_eq!(
            parse_cxx_param("at::detail::Array<char const*, 2>"),
            bytes(2, true)
        );
        assert_eq!(
            parse_cxx_param("std::array<float*, 4>"),
            ParamType::PointerArray {
                dtype: DType::F32,
                is_const: false,
                count: 4
            }
        );
        for unknown in [
            "std::array<float, 4>",
            "std::array<char*, 0>",
            "at::native::FillFunctor<float>",
            "std::array<char*>",
        ] {
            assert!(
                matches!(parse_cxx_param(unknown), ParamType::Unknown { .. }),
                "{unknown}"
            );
        }
    }

    fn ptr(dtype: DType, is_const: bool) -> ParamType {
        ParamType::Pointer { dtype, is_const }
    }
    fn scalar(dtype: DType) -> ParamType {
        ParamType::Scalar { dtype }
    }

    #[test]
    fn restrict_and_top_level_const_do_not_change_the_pointee() {
        assert_eq!(
            parse_cxx_param("float const* __restrict"),
            ptr(DType::F32, true)
        );
        assert_eq!(
            parse_cxx_param("float* __restrict__"),
            ptr(DType::F32, false)
        );
        assert_eq!(parse_cxx_param("double* const"), ptr(DType::F64, false));
        assert_eq!(parse_cxx_param("const int*"), ptr(DType::I32, true));
        assert_eq!(parse_cxx_param("int const"), scalar(DType::I32));
    }

    #[test]
    fn structs_by_value_are_unknown_and_pointers_to_them_are_bytes() {
        assert_eq!(
            parse_cxx_param("Params"),
            ParamType::Unknown {
                spelling: "Params".into()
            }
        );
        assert_eq!(parse_cxx_param("Params const*"), ptr(DType::Bytes, true));
        assert_eq!(parse_cxx_param("float**"), ptr(DType::Bytes, false));
    }

    #[test]
    fn arg_types_list_parses_pointers_constness_and_scalars() {
        let types =
            parse_arg_types("const f32*, f32*,f32 ,i32,const bf16 *,u64,bool,f16*").unwrap();
        assert_eq!(
            types,
            vec![
                ptr(DType::F32, true),
                ptr(DType::F32, false),
                scalar(DType::F32),
                scalar(DType::I32),
                ptr(DType::BF16, true),
                scalar(DType::U64),
                scalar(DType::Bool),
                ptr(DType::F16, false),
            ]
        );
    }

    #[test]
    fn arg_types_list_rejects_unknown_names_with_their_position() {
        let err = parse_arg_types("f32*,float,i32").unwrap_err();
        assert_eq!(
            err,
            ArgTypesError::Unknown {
                position: 1,
                entry: "float".into()
            }
        );
        assert!(err.to_string().contains("f32"));
        assert_eq!(
            parse_arg_types("f32*,,i32").unwrap_err(),
            ArgTypesError::Unknown {
                position: 1,
                entry: "".into()
            }
        );
    }

    #[test]
    fn arg_types_list_rejects_const_scalars() {
        let err = parse_arg_types("const i32").unwrap_err();
        assert!(matches!(
            err,
            ArgTypesError::ConstScalar { position: 0, .. }
        ));
    }
}

//! `--arg-sizes` (DITTO_ARG_SIZES): how many elements a pointer argument
//! covers, as an expression over the dispatch's integer scalar arguments.
//! Owns the syntax, its parsing and the evaluation over kernarg bytes;
//! never decides what happens when a size does not fit an allocation.
//!
//! Syntax: a comma-separated list of `argN=EXPR`, where `argN` is the
//! pointer argument at index N (from 0), and EXPR a sum (`+`) of products
//! (`*`) of terms, each a non-negative integer or `argK`, the value of the
//! integer scalar argument K in this dispatch. Parameter names are unknown
//! (mangled names carry only types), so arguments go by index:
//! `arg2=arg3` (c has n elements), `arg2=arg3*arg4` (m*n),
//! `arg0=arg3*4+16`.

use crate::layout::{Param, ParamKind};
use std::collections::BTreeMap;
use std::fmt;

/// One term of a product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Term {
    Number(u64),
    Arg(u32),
}

/// A sum of products of terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeExpr {
    pub sum: Vec<Vec<Term>>,
}

/// Pointer argument index → its extent in elements.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ArgSizes {
    pub sizes: BTreeMap<u32, SizeExpr>,
}

const HINT: &str = "write argN=EXPR, EXPR made of numbers and integer arguments argK with * and +, \
     e.g. arg2=arg3 or arg2=arg3*arg4";

/// Why an `--arg-sizes` list does not parse, or does not fit a kernel or a
/// dispatch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgSizesError {
    #[error("arg-sizes `{text}`: `{term}` is not an argument (argN, N from 0); {HINT}")]
    NotAnArgument { text: String, term: String },
    #[error("arg-sizes `{text}`: `{item}` has no `=`; {HINT}")]
    NoEquals { text: String, item: String },
    #[error("arg-sizes `{text}`: `{item}` has an empty term; {HINT}")]
    EmptyTerm { text: String, item: String },
    #[error("arg-sizes `{text}`: arg{target} is given twice")]
    GivenTwice { text: String, target: u32 },
    #[error("the size of arg{0} overflows")]
    Overflows(u32),
    #[error("arg-sizes: arg{0} is not a pointer argument")]
    NotAPointer(u32),
    #[error("arg-sizes: the kernel has no argument arg{0}")]
    NoSuchArgument(u32),
    #[error("arg-sizes: arg{0} is not an integer scalar argument")]
    NotAnInteger(u32),
    #[error("arg-sizes: arg{0} lies outside the kernarg bytes")]
    OutsideKernarg(u32),
    #[error("arg-sizes: arg{0} is negative in this dispatch")]
    Negative(u32),
}

fn parse_arg(text: &str, whole: &str) -> Result<u32, ArgSizesError> {
    text.trim()
        .strip_prefix("arg")
        .and_then(|n| n.parse::<u32>().ok())
        .ok_or_else(|| ArgSizesError::NotAnArgument {
            text: whole.to_string(),
            term: text.trim().to_string(),
        })
}

/// The text form, which [`ArgSizes::parse`] reads back to the same sizes:
/// `arg2=arg3*arg4+16,arg5=8` (what crosses into the application as
/// `DITTO_ARG_SIZES`).
impl fmt::Display for ArgSizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (target, expr)) in self.sizes.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "arg{target}={expr}")?;
        }
        Ok(())
    }
}

impl fmt::Display for SizeExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, product) in self.sum.iter().enumerate() {
            if i > 0 {
                f.write_str("+")?;
            }
            for (j, term) in product.iter().enumerate() {
                if j > 0 {
                    f.write_str("*")?;
                }
                match term {
                    Term::Number(n) => write!(f, "{n}")?,
                    Term::Arg(k) => write!(f, "arg{k}")?,
                }
            }
        }
        Ok(())
    }
}

impl ArgSizes {
    pub fn parse(text: &str) -> Result<ArgSizes, ArgSizesError> {
        let mut sizes = BTreeMap::new();
        for item in text.split(',') {
            let Some((target, expr)) = item.split_once('=') else {
                return Err(ArgSizesError::NoEquals {
                    text: text.to_string(),
                    item: item.trim().to_string(),
                });
            };
            let target = parse_arg(target, text)?;
            let mut sum = Vec::new();
            for product in expr.split('+') {
                let mut terms = Vec::new();
                for term in product.split('*') {
                    let term = term.trim();
                    if term.is_empty() {
                        return Err(ArgSizesError::EmptyTerm {
                            text: text.to_string(),
                            item: item.trim().to_string(),
                        });
                    }
                    terms.push(match term.parse::<u64>() {
                        Ok(n) => Term::Number(n),
                        Err(_) => Term::Arg(parse_arg(term, text)?),
                    });
                }
                sum.push(terms);
            }
            if sizes.insert(target, SizeExpr { sum }).is_some() {
                return Err(ArgSizesError::GivenTwice {
                    text: text.to_string(),
                    target,
                });
            }
        }
        Ok(ArgSizes { sizes })
    }

    /// The extent in elements of pointer argument `index` in a dispatch
    /// with these kernarg bytes: `Ok(None)` when no size was given for it;
    /// `Err` names what is wrong (not a pointer, a term that is no integer
    /// scalar, a negative value, an overflow).
    pub fn elements(
        &self,
        index: u32,
        params: &[Param],
        kernarg: &[u8],
    ) -> Result<Option<u64>, ArgSizesError> {
        let Some(expr) = self.sizes.get(&index) else {
            return Ok(None);
        };
        let mut total: u64 = 0;
        for product in &expr.sum {
            let mut value: u64 = 1;
            for term in product {
                let factor = match *term {
                    Term::Number(n) => n,
                    Term::Arg(k) => scalar_value(params, k, kernarg)?,
                };
                value = value
                    .checked_mul(factor)
                    .ok_or(ArgSizesError::Overflows(index))?;
            }
            total = total
                .checked_add(value)
                .ok_or(ArgSizesError::Overflows(index))?;
        }
        Ok(Some(total))
    }

    /// Checks that every target is a pointer and every term an integer
    /// scalar of this kernel; the error names the first that is not.
    pub fn check(&self, params: &[Param]) -> Result<(), ArgSizesError> {
        for (&target, expr) in &self.sizes {
            match params.iter().find(|p| p.index == target) {
                Some(Param {
                    kind: ParamKind::Pointer { .. },
                    ..
                }) => {}
                _ => return Err(ArgSizesError::NotAPointer(target)),
            }
            for term in expr.sum.iter().flatten() {
                if let Term::Arg(k) = *term {
                    integer_param(params, k)?;
                }
            }
        }
        Ok(())
    }
}

fn integer_param(params: &[Param], k: u32) -> Result<&Param, ArgSizesError> {
    let p = params
        .iter()
        .find(|p| p.index == k)
        .ok_or(ArgSizesError::NoSuchArgument(k))?;
    use ditto_types::DType::{I8, I16, I32, I64, U8, U16, U32, U64};
    match p.kind {
        ParamKind::Scalar {
            dtype: I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64,
        } => Ok(p),
        _ => Err(ArgSizesError::NotAnInteger(k)),
    }
}

/// The value of integer scalar argument `k` in `kernarg`.
fn scalar_value(params: &[Param], k: u32, kernarg: &[u8]) -> Result<u64, ArgSizesError> {
    let p = integer_param(params, k)?;
    let ParamKind::Scalar { dtype } = p.kind else {
        unreachable!("integer_param returns scalars only")
    };
    let start = p.offset as usize;
    let size = dtype.size();
    let bytes = kernarg
        .get(start..start + size)
        .ok_or(ArgSizesError::OutsideKernarg(k))?;
    let mut wide = [0u8; 8];
    wide[..size].copy_from_slice(bytes);
    let signed = matches!(
        dtype,
        ditto_types::DType::I8
            | ditto_types::DType::I16
            | ditto_types::DType::I32
            | ditto_types::DType::I64
    );
    if signed && bytes[size - 1] & 0x80 != 0 {
        return Err(ArgSizesError::Negative(k));
    }
    Ok(u64::from_le_bytes(wide))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ditto_types::DType;

    /// vector_add-like: (const float*, const float*, float*, int n, unsigned long m)
    fn params() -> Vec<Param> {
        let ptr = |index, offset, is_const| Param {
            index,
            kind: ParamKind::Pointer {
                dtype: DType::F32,
                is_const,
            },
            offset,
            size: 8,
        };
        vec![
            ptr(0, 0, true),
            ptr(1, 8, true),
            ptr(2, 16, false),
            Param {
                index: 3,
                kind: ParamKind::Scalar { dtype: DType::I32 },
                offset: 24,
                size: 4,
            },
            Param {
                index: 4,
                kind: ParamKind::Scalar { dtype: DType::U64 },
                offset: 32,
                size: 8,
            },
        ]
    }

    fn kernarg(n: i32, m: u64) -> Vec<u8> {
        let mut k = vec![0u8; 40];
        k[24..28].copy_from_slice(&n.to_le_bytes());
        k[32..40].copy_from_slice(&m.to_le_bytes());
        k
    }

    #[test]
    fn expressions_evaluate_over_the_dispatch_scalars() {
        let s = ArgSizes::parse("arg2=arg3, arg0 = arg3*arg4, arg1=arg3*4+16").unwrap();
        let (p, k) = (params(), kernarg(1000, 3));
        assert!(s.check(&p).is_ok());
        assert_eq!(s.elements(2, &p, &k), Ok(Some(1000)));
        assert_eq!(s.elements(0, &p, &k), Ok(Some(3000)));
        assert_eq!(s.elements(1, &p, &k), Ok(Some(4016)));
        assert_eq!(s.elements(4, &p, &k), Ok(None), "no size given");
    }

    #[test]
    fn negative_or_non_integer_terms_and_non_pointer_targets_are_errors() {
        let p = params();
        let e = ArgSizes::parse("arg2=arg3")
            .unwrap()
            .elements(2, &p, &kernarg(-1, 0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("arg3 is negative"), "{e}");
        let e = ArgSizes::parse("arg2=arg0").unwrap().check(&p).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("arg0 is not an integer scalar"), "{e}");
        let e = ArgSizes::parse("arg3=4").unwrap().check(&p).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("arg3 is not a pointer"), "{e}");
        let e = ArgSizes::parse("arg2=arg9").unwrap().check(&p).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("no argument arg9"), "{e}");
        let e = ArgSizes::parse("arg2=arg4*arg4")
            .unwrap()
            .elements(2, &p, &kernarg(1, u64::MAX))
            .unwrap_err()
            .to_string();
        assert!(e.contains("overflows"), "{e}");
    }

    #[test]
    fn malformed_lists_are_rejected_with_how_to_write_them() {
        for (text, what) in [
            ("out=n", "`out` is not an argument"),
            ("arg2", "has no `=`"),
            ("arg2=arg3*", "empty term"),
            ("arg2=n", "`n` is not an argument"),
            ("arg2=1,arg2=2", "given twice"),
        ] {
            let e = ArgSizes::parse(text).unwrap_err().to_string();
            assert!(e.contains(what), "{text}: {e}");
        }
    }

    #[test]
    fn the_text_form_reads_back_to_the_same_sizes() {
        for text in ["arg2=arg3", "arg0 = arg3*arg4, arg1=arg3*4+16", "arg1=7"] {
            let sizes = ArgSizes::parse(text).unwrap();
            assert_eq!(ArgSizes::parse(&sizes.to_string()), Ok(sizes.clone()));
        }
        let sizes = ArgSizes::parse("arg2=arg3*arg4+16, arg0=8").unwrap();
        assert_eq!(sizes.to_string(), "arg0=8,arg2=arg3*arg4+16");
    }
}

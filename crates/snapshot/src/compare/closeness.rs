//! Element-wise comparison: tolerances (torch.testing.assert_close's
//! per-dtype defaults, user overrides, ULP distance), decoding array bytes
//! into elements, and the statistics of one array pair. Knows nothing of
//! snapshots, dispatches or files.

use crate::store::StoreError;
use ditto_protocol::DType;
use half::{bf16, f16};
use std::path::PathBuf;

/// How close two elements must be: `|a - b| <= atol + rtol * |b|`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

/// torch.testing.assert_close's defaults; integers, bool and raw bytes exact.
pub fn default_tolerance(dtype: DType) -> Tolerance {
    let (rtol, atol) = match dtype {
        DType::F16 => (1e-3, 1e-5),
        DType::BF16 => (1.6e-2, 1e-5),
        DType::F32 => (1.3e-6, 1e-5),
        DType::F64 => (1e-7, 1e-7),
        _ => (0.0, 0.0),
    };
    Tolerance { rtol, atol }
}

/// What the user asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CompareOptions {
    /// `None`: per-dtype defaults. Applies to numeric dtypes; bool and raw
    /// bytes are always compared exactly.
    pub tolerance: Option<Tolerance>,
    /// NaN equals NaN only when set.
    pub equal_nan: bool,
    /// `--ulp N`: finite floats match when at most N units in the last
    /// place apart (in their own dtype); replaces atol/rtol for floats,
    /// integers stay exact. Exclusive with `tolerance`.
    pub ulp: Option<u64>,
}

impl CompareOptions {
    /// `--atol` and `--rtol` are given together or not at all.
    pub fn new(
        atol: Option<f64>,
        rtol: Option<f64>,
        equal_nan: bool,
    ) -> Result<Self, CompareError> {
        let tolerance = match (atol, rtol) {
            (Some(atol), Some(rtol)) => {
                // inf would make `atol + rtol * |ref|` NaN where |ref| is 0.
                let usable = |t: f64| t >= 0.0 && t.is_finite();
                if !(usable(atol) && usable(rtol)) {
                    return Err(CompareError::Usage(format!(
                        "tolerances must be finite, non-negative numbers (got --atol {atol} --rtol {rtol})"
                    )));
                }
                Some(Tolerance { rtol, atol })
            }
            (None, None) => None,
            (Some(_), None) => {
                return Err(CompareError::Usage(
                    "--atol was given without --rtol: give both, or neither for the per-dtype defaults".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(CompareError::Usage(
                    "--rtol was given without --atol: give both, or neither for the per-dtype defaults".into(),
                ));
            }
        };
        Ok(CompareOptions {
            tolerance,
            equal_nan,
            ulp: None,
        })
    }

    /// Adds `--ulp N`; refused together with `--atol/--rtol`.
    pub fn with_ulp(mut self, ulp: Option<u64>) -> Result<Self, CompareError> {
        if ulp.is_some() && self.tolerance.is_some() {
            return Err(CompareError::Usage(
                "--ulp cannot be combined with --atol/--rtol: choose a distance in units in the last place \
                 or absolute/relative tolerances"
                    .into(),
            ));
        }
        self.ulp = ulp;
        Ok(self)
    }

    pub fn tolerance_for(&self, dtype: DType) -> Tolerance {
        match (dtype, self.tolerance) {
            (DType::Bool | DType::Bytes, _) => Tolerance {
                rtol: 0.0,
                atol: 0.0,
            },
            (_, Some(t)) => t,
            (_, None) => default_tolerance(dtype),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "{location}: the reference is {reference} but the optimized run is {optimized}; \
         both runs must pass the same element types (check --arg-types)"
    )]
    DtypeDiffers {
        location: String,
        reference: &'static str,
        optimized: &'static str,
    },
    #[error(
        "{location} ({dtype}): the reference has {reference} elements but the optimized run has {optimized}; \
         both runs must use the same problem size"
    )]
    LengthDiffers {
        location: String,
        dtype: &'static str,
        reference: usize,
        optimized: usize,
    },
    #[error(
        "{location}: the reference captured {} but the optimized run captured {} \
         (run both with the same --capture)", .reference.join(", "), .optimized.join(", ")
    )]
    ArgumentsDiffer {
        location: String,
        /// Tensor names (`arg1`, `arg0.before`), in manifest order.
        reference: Vec<String>,
        optimized: Vec<String>,
    },
    #[error(
        "the reference ({reference_dir}) captured {reference} dispatch(es) of {kernel} but the optimized run \
         ({optimized_dir}) captured {optimized}: {detail}"
    )]
    DispatchesDiffer {
        kernel: String,
        reference_dir: PathBuf,
        optimized_dir: PathBuf,
        reference: usize,
        optimized: usize,
        detail: String,
    },
    #[error(
        "{dispatches} dispatch(es) of {kernel} were captured in {reference_dir} and {optimized_dir} but none \
         carried an output buffer, so nothing was compared: for an extern \"C\" kernel pass --arg-types \
         (e.g. `const f32*,f32*,i32`); otherwise rerun with DITTO_LOG=warn to see why the tool skipped \
         its pointer arguments"
    )]
    NothingCompared {
        kernel: String,
        reference_dir: PathBuf,
        optimized_dir: PathBuf,
        dispatches: usize,
    },
    #[error(
        "{location}: the reference ran {reference} but the optimized run ran {optimized}; dispatches are \
         paired by (kernel, rank, dispatch index): both runs must dispatch the same kernels in the same order"
    )]
    KernelsDiffer {
        location: String,
        reference: String,
        optimized: String,
    },
    #[error(
        "dispatches of {kernel} that were not captured cannot be compared ({reference_dir}, \
         {optimized_dir}): {}", .problems.join("; ")
    )]
    NotCapturedDispatches {
        kernel: String,
        reference_dir: PathBuf,
        optimized_dir: PathBuf,
        /// One line per uncaptured dispatch (or run, or buffer), with why.
        problems: Vec<String>,
    },
    #[error("{which} run ({dir}) never dispatched a kernel matching {query:?}; {what_ran}")]
    NotCaptured {
        which: &'static str,
        dir: PathBuf,
        query: String,
        what_ran: String,
    },
}

/// One element decoded for comparison.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum Element {
    Float(f64),
    Int(i128),
}

/// Elements of `bytes` (little-endian) as `dtype`.
pub fn elements(dtype: DType, bytes: &[u8]) -> Box<dyn Iterator<Item = Element> + '_> {
    macro_rules! chunks {
        ($n:expr, $f:expr) => {
            Box::new(bytes.chunks_exact($n).map(|c| $f(c.try_into().unwrap())))
        };
    }
    match dtype {
        DType::F16 => chunks!(2, |c| Element::Float(f16::from_le_bytes(c).to_f64())),
        DType::BF16 => chunks!(2, |c| Element::Float(bf16::from_le_bytes(c).to_f64())),
        DType::F32 => chunks!(4, |c| Element::Float(f32::from_le_bytes(c) as f64)),
        DType::F64 => chunks!(8, |c| Element::Float(f64::from_le_bytes(c))),
        DType::I8 => chunks!(1, |c| Element::Int(i8::from_le_bytes(c) as i128)),
        DType::I16 => chunks!(2, |c| Element::Int(i16::from_le_bytes(c) as i128)),
        DType::I32 => chunks!(4, |c| Element::Int(i32::from_le_bytes(c) as i128)),
        DType::I64 => chunks!(8, |c| Element::Int(i64::from_le_bytes(c) as i128)),
        DType::U8 | DType::Bool | DType::Bytes => {
            chunks!(1, |c| Element::Int(u8::from_le_bytes(c) as i128))
        }
        DType::U16 => chunks!(2, |c| Element::Int(u16::from_le_bytes(c) as i128)),
        DType::U32 => chunks!(4, |c| Element::Int(u32::from_le_bytes(c) as i128)),
        DType::U64 => chunks!(8, |c| Element::Int(u64::from_le_bytes(c) as i128)),
    }
}

/// A mismatching element kept for the report's table.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct WorstElement {
    pub index: u64,
    pub reference: Element,
    pub optimized: Element,
    pub abs_diff: f64,
}

/// NaN and infinity counts of both sides.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct NonFiniteCounts {
    pub reference_nan: u64,
    pub optimized_nan: u64,
    pub reference_inf: u64,
    pub optimized_inf: u64,
}

/// Result of comparing two arrays. As in torch, the greatest differences
/// are taken over mismatching elements only (0 when all match); a NaN
/// difference counts as the greatest.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayStats {
    pub dtype: DType,
    pub tolerance: Tolerance,
    pub total_elements: u64,
    pub mismatched_elements: u64,
    pub max_abs_diff: f64,
    pub max_abs_diff_index: u64,
    pub max_rel_diff: f64,
    pub max_rel_diff_index: u64,
    /// With `--ulp`: the greatest ULP distance among mismatching finite
    /// floats, and where.
    pub max_ulp_diff: Option<u64>,
    pub max_ulp_diff_index: u64,
    pub nonfinite: NonFiniteCounts,
    /// Up to [`WORST_ELEMENTS`] mismatching elements, greatest difference first.
    pub worst: Vec<WorstElement>,
}

pub const WORST_ELEMENTS: usize = 5;

impl ArrayStats {
    pub fn matches(&self) -> bool {
        self.mismatched_elements == 0
    }
}

/// Distance between two finite floats of `dtype` in units in the last
/// place: how many representable values of that dtype lie between them
/// (+0 and -0 are 0 apart). `None` for non-float dtypes.
pub fn ulp_distance(dtype: DType, a: f64, b: f64) -> Option<u64> {
    // Sign-magnitude bits to a line where adjacent floats differ by 1.
    fn ordered(bits: u64, sign_bit: u64) -> i128 {
        let magnitude = (bits & (sign_bit - 1)) as i128;
        if bits & sign_bit != 0 {
            -magnitude
        } else {
            magnitude
        }
    }
    let (oa, ob) = match dtype {
        DType::F64 => (ordered(a.to_bits(), 1 << 63), ordered(b.to_bits(), 1 << 63)),
        DType::F32 => (
            ordered((a as f32).to_bits() as u64, 1 << 31),
            ordered((b as f32).to_bits() as u64, 1 << 31),
        ),
        DType::F16 => (
            ordered(f16::from_f64(a).to_bits() as u64, 1 << 15),
            ordered(f16::from_f64(b).to_bits() as u64, 1 << 15),
        ),
        DType::BF16 => (
            ordered(bf16::from_f64(a).to_bits() as u64, 1 << 15),
            ordered(bf16::from_f64(b).to_bits() as u64, 1 << 15),
        ),
        _ => return None,
    };
    Some((oa - ob).unsigned_abs() as u64)
}

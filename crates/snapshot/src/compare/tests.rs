//! Tests of the comparison engine.

use super::*;
use crate::store::Array;
use ditto_protocol::DType;
use half::{bf16, f16};

fn f32s(v: &[f32]) -> Array {
    Array {
        dtype: DType::F32,
        bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}
fn f64s(v: &[f64]) -> Array {
    Array {
        dtype: DType::F64,
        bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}
fn cmp(r: &Array, o: &Array, opts: CompareOptions) -> ArrayStats {
    compare_arrays(r, o, &opts, "dispatch 0, arg 1").unwrap()
}
fn defaults() -> CompareOptions {
    CompareOptions::default()
}

#[test]
fn identical_arrays_match_with_zero_differences() {
    let a = f32s(&[1.0, 2.0, -3.5, 0.0]);
    let s = cmp(&a, &a.clone(), defaults());
    assert!(s.matches());
    assert_eq!(
        (s.total_elements, s.mismatched_elements, s.max_abs_diff),
        (4, 0, 0.0)
    );
}

#[test]
fn f32_difference_within_default_tolerance_matches_and_beyond_it_does_not() {
    // atol 1e-5 + rtol 1.3e-6 * 1000 = 1.31e-3 allowed at 1000.
    let r = f32s(&[1000.0, 1000.0]);
    let o = f32s(&[1000.001, 1000.01]);
    let s = cmp(&r, &o, defaults());
    assert_eq!(s.mismatched_elements, 1);
    assert_eq!(s.max_abs_diff_index, 1);
    assert!((s.max_abs_diff - 0.01).abs() < 1e-4, "{}", s.max_abs_diff);
    assert!((s.max_rel_diff - 1e-5).abs() < 1e-7, "{}", s.max_rel_diff);
}

#[test]
fn reduce_sum_against_zero_reports_like_torch() {
    let s = cmp(&f32s(&[114688.0]), &f32s(&[0.0]), defaults());
    assert_eq!(s.mismatched_elements, 1);
    assert_eq!(s.max_abs_diff, 114688.0);
    assert_eq!(s.max_rel_diff, 1.0);
    assert_eq!(
        s.tolerance,
        Tolerance {
            rtol: 1.3e-6,
            atol: 1e-5
        }
    );
    assert_eq!(
        s.worst[0],
        WorstElement {
            index: 0,
            reference: Element::Float(114688.0),
            optimized: Element::Float(0.0),
            abs_diff: 114688.0
        }
    );
}

#[test]
fn nan_equals_nan_only_with_equal_nan() {
    let r = f64s(&[f64::NAN, 1.0]);
    let o = f64s(&[f64::NAN, 1.0]);
    let strict = cmp(&r, &o, defaults());
    assert_eq!(strict.mismatched_elements, 1);
    assert!(strict.max_abs_diff.is_nan());
    assert_eq!(strict.nonfinite.reference_nan, 1);
    assert_eq!(strict.nonfinite.optimized_nan, 1);
    let lenient = cmp(
        &r,
        &o,
        CompareOptions {
            equal_nan: true,
            ..defaults()
        },
    );
    assert!(lenient.matches());
    // A NaN against a number never matches, even with equal_nan.
    let s = cmp(
        &f64s(&[1.0]),
        &f64s(&[f64::NAN]),
        CompareOptions {
            equal_nan: true,
            ..defaults()
        },
    );
    assert_eq!(s.mismatched_elements, 1);
}

#[test]
fn ulp_distance_counts_representable_values_in_the_dtype() {
    let next = f32::from_bits(1.0f32.to_bits() + 3);
    assert_eq!(ulp_distance(DType::F32, 1.0, next as f64), Some(3));
    assert_eq!(ulp_distance(DType::F32, -0.0, 0.0), Some(0));
    // The smallest subnormals on both sides of zero are 2 apart.
    let tiny = f32::from_bits(1) as f64;
    assert_eq!(ulp_distance(DType::F32, -tiny, tiny), Some(2));
    assert_eq!(ulp_distance(DType::F64, 1.0, 1.0 + f64::EPSILON), Some(1));
    assert_eq!(ulp_distance(DType::BF16, 1.0, 1.0078125), Some(1));
    assert_eq!(ulp_distance(DType::I32, 1.0, 2.0), None);
}

#[test]
fn ulp_tolerance_replaces_atol_and_rtol_and_excludes_them() {
    let one = 1.0f32;
    let r = f32s(&[one, one, 1000.0]);
    let o = f32s(&[
        f32::from_bits(one.to_bits() + 2),
        f32::from_bits(one.to_bits() + 3),
        1000.0,
    ]);
    let opts = CompareOptions::default().with_ulp(Some(2)).unwrap();
    let s = cmp(&r, &o, opts);
    assert_eq!(s.mismatched_elements, 1);
    assert_eq!((s.max_ulp_diff, s.max_ulp_diff_index), (Some(3), 1));
    let err = CompareOptions::new(Some(1e-5), Some(1e-5), false)
        .unwrap()
        .with_ulp(Some(4))
        .unwrap_err();
    assert!(
        err.to_string().contains("--ulp cannot be combined"),
        "{err}"
    );
    // Integers stay exact under --ulp.
    let i = |v: &[i32]| Array {
        dtype: DType::I32,
        bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    };
    assert_eq!(cmp(&i(&[5]), &i(&[6]), opts).mismatched_elements, 1);
}

#[test]
fn infinity_equals_only_the_same_infinity() {
    let r = f32s(&[f32::INFINITY, f32::INFINITY, f32::NEG_INFINITY, 1e30]);
    let o = f32s(&[
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        f32::INFINITY,
    ]);
    let s = cmp(&r, &o, defaults());
    assert_eq!(s.mismatched_elements, 2);
    assert_eq!(
        s.worst.iter().map(|w| w.index).collect::<Vec<_>>(),
        vec![1, 3]
    );
    assert_eq!(s.max_abs_diff, f64::INFINITY);
    assert_eq!(s.nonfinite.reference_inf, 3);
    assert_eq!(s.nonfinite.optimized_inf, 4);
}

#[test]
fn f16_and_bf16_use_their_own_default_tolerances() {
    let h = |v: &[f32]| Array {
        dtype: DType::F16,
        bytes: v
            .iter()
            .flat_map(|x| f16::from_f32(*x).to_le_bytes())
            .collect(),
    };
    // 1.0 vs 1.0009765625 (next f16): diff 9.77e-4 <= 1e-5 + 1e-3.
    let s = cmp(
        &h(&[1.0, 1.0]),
        &h(&[1.0 + 1.0 / 1024.0, 1.0078125]),
        defaults(),
    );
    assert_eq!(s.mismatched_elements, 1);
    assert_eq!(s.max_abs_diff_index, 1);
    let b = |v: &[f32]| Array {
        dtype: DType::BF16,
        bytes: v
            .iter()
            .flat_map(|x| bf16::from_f32(*x).to_le_bytes())
            .collect(),
    };
    // bf16: 1.0 vs 1.0078125 (next bf16) is within rtol 1.6e-2; 1.03125 is not.
    let s = cmp(&b(&[1.0, 1.0]), &b(&[1.0078125, 1.03125]), defaults());
    assert_eq!(s.mismatched_elements, 1);
    assert_eq!(s.max_abs_diff, 0.03125);
}

#[test]
fn integers_compare_exactly_by_default() {
    let i = |v: &[i32]| Array {
        dtype: DType::I32,
        bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    };
    let s = cmp(&i(&[5, -7, 100]), &i(&[5, -6, 100]), defaults());
    assert_eq!(s.mismatched_elements, 1);
    assert_eq!(s.max_abs_diff, 1.0);
    assert_eq!(s.worst[0].reference, Element::Int(-7));
    let u = Array {
        dtype: DType::U64,
        bytes: u64::MAX.to_le_bytes().to_vec().into(),
    };
    assert!(cmp(&u, &u.clone(), defaults()).matches());
    // With user tolerances integers may differ by atol.
    let loose = CompareOptions::new(Some(1.0), Some(0.0), false).unwrap();
    assert!(cmp(&i(&[5, -7]), &i(&[6, -7]), loose).matches());
}

#[test]
fn bytes_stay_exact_even_with_user_tolerances() {
    let r = Array {
        dtype: DType::Bytes,
        bytes: vec![1, 2, 3].into(),
    };
    let o = Array {
        dtype: DType::Bytes,
        bytes: vec![1, 2, 4].into(),
    };
    let loose = CompareOptions::new(Some(10.0), Some(1.0), false).unwrap();
    assert_eq!(cmp(&r, &o, loose).mismatched_elements, 1);
}

#[test]
fn default_tolerances_follow_torch_per_dtype() {
    assert_eq!(
        default_tolerance(DType::F16),
        Tolerance {
            rtol: 1e-3,
            atol: 1e-5
        }
    );
    assert_eq!(
        default_tolerance(DType::BF16),
        Tolerance {
            rtol: 1.6e-2,
            atol: 1e-5
        }
    );
    assert_eq!(
        default_tolerance(DType::F32),
        Tolerance {
            rtol: 1.3e-6,
            atol: 1e-5
        }
    );
    assert_eq!(
        default_tolerance(DType::F64),
        Tolerance {
            rtol: 1e-7,
            atol: 1e-7
        }
    );
    for d in [DType::I8, DType::I32, DType::U64, DType::Bool, DType::Bytes] {
        assert_eq!(
            default_tolerance(d),
            Tolerance {
                rtol: 0.0,
                atol: 0.0
            }
        );
    }
}

#[test]
fn atol_and_rtol_must_come_together() {
    assert!(matches!(
        CompareOptions::new(Some(1e-3), None, false),
        Err(CompareError::Usage(_))
    ));
    assert!(matches!(
        CompareOptions::new(None, Some(1e-3), false),
        Err(CompareError::Usage(_))
    ));
    let o = CompareOptions::new(Some(0.5), Some(0.25), true).unwrap();
    assert_eq!(
        o.tolerance_for(DType::F32),
        Tolerance {
            rtol: 0.25,
            atol: 0.5
        }
    );
    assert!(o.equal_nan);
}

#[test]
fn different_lengths_or_dtypes_are_errors_not_mismatches() {
    let err = compare_arrays(
        &f32s(&[1.0, 2.0]),
        &f32s(&[1.0]),
        &defaults(),
        "dispatch 0, arg 1",
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(
        err,
        CompareError::LengthDiffers {
            reference: 2,
            optimized: 1,
            ..
        }
    ));
    assert!(
        msg.contains("dispatch 0, arg 1") && msg.contains("float32"),
        "{msg}"
    );
    let err = compare_arrays(&f32s(&[1.0, 2.0]), &f64s(&[1.0]), &defaults(), "x").unwrap_err();
    assert!(matches!(
        err,
        CompareError::DtypeDiffers {
            reference: "float32",
            optimized: "float64",
            ..
        }
    ));
}

#[test]
fn worst_elements_are_the_greatest_differences_in_order() {
    let r = f32s(&[0.0; 8]);
    let o = f32s(&[1.0, 7.0, 3.0, 0.0, 5.0, 2.0, 6.0, 4.0]);
    let s = cmp(&r, &o, defaults());
    assert_eq!(s.mismatched_elements, 7);
    assert_eq!(
        s.worst.iter().map(|w| w.index).collect::<Vec<_>>(),
        vec![1, 6, 4, 7, 2]
    );
    assert_eq!(s.max_rel_diff, f64::INFINITY); // reference 0
}

#[test]
fn an_infinite_reference_that_differs_has_an_infinite_relative_difference() {
    // inf vs -inf and inf vs 1: |a - b| is inf, and inf / |inf| must not become NaN
    // (a NaN would rank above every real relative difference).
    let s = cmp(
        &f32s(&[1.0, f32::INFINITY, f32::INFINITY]),
        &f32s(&[1.5, f32::NEG_INFINITY, 1.0]),
        defaults(),
    );
    assert_eq!(s.mismatched_elements, 3);
    assert_eq!(s.max_rel_diff, f64::INFINITY);
    assert_eq!(s.max_rel_diff_index, 1);
    assert_eq!(s.max_abs_diff, f64::INFINITY);
}

#[test]
fn signed_zeros_and_subnormals_compare_by_value() {
    let tiny = f32::from_bits(1); // smallest subnormal
    let s = cmp(
        &f32s(&[0.0, tiny, -tiny]),
        &f32s(&[-0.0, 0.0, tiny]),
        defaults(),
    );
    assert!(s.matches(), "{s:?}");
    // Exact tolerances still tell a subnormal from zero.
    let exact = CompareOptions::new(Some(0.0), Some(0.0), false).unwrap();
    let s = cmp(&f32s(&[0.0, tiny]), &f32s(&[-0.0, 0.0]), exact);
    assert_eq!(s.mismatched_elements, 1);
    assert_eq!(s.max_abs_diff_index, 1);
    assert_eq!(s.max_rel_diff, 1.0);
}

#[test]
fn integer_differences_at_the_extremes_do_not_overflow() {
    let i64s = |v: &[i64]| Array {
        dtype: DType::I64,
        bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    };
    let s = cmp(&i64s(&[i64::MIN, 0]), &i64s(&[i64::MAX, 0]), defaults());
    assert_eq!(s.mismatched_elements, 1);
    assert_eq!(s.max_abs_diff, u64::MAX as f64);
    // The reference 0 gives an infinite relative difference, as in torch.
    let s = cmp(&i64s(&[0]), &i64s(&[i64::MIN]), defaults());
    assert_eq!(s.max_rel_diff, f64::INFINITY);
}

/// Dispatch `index` of `kernel`, its buffers sent beside it.
fn dispatch(index: u64, kernel: &str) -> ditto_protocol::Dispatch {
    ditto_protocol::Dispatch {
        index,
        kernel: ditto_protocol::KernelName {
            mangled: kernel.to_string(),
            demangled: kernel.to_string(),
        },
        grid: [1, 1, 1],
        block: [1, 1, 1],
        duration_ns: None,
        buffers: vec![],
        launch: None,
    }
}

/// A captured buffer of argument `arg` in `phase`: four bytes of `data`,
/// read as `dtype`, a whole allocation.
fn four_bytes(arg: u32, phase: Phase, dtype: DType, data: Vec<u8>) -> crate::store::CapturedBuffer {
    let buffer = ditto_protocol::Buffer {
        phase,
        arg_index: arg,
        name: None,
        dtype,
        transport: ditto_protocol::Transport::Ipc {
            handle: vec![0; 32],
            owner_node: None,
        },
        owner_pid: 1,
        alloc_base: 0,
        alloc_size: 4,
        offset: 0,
        extent: 4,
        fingerprint: ditto_protocol::fingerprint(&data),
    };
    crate::store::CapturedBuffer { buffer, data }
}

fn snapshot_without_buffers(dir: &std::path::Path) -> Snapshot {
    let mut w = crate::store::SnapshotWriter::create(dir, "reduce_sum").unwrap();
    w.add_dispatch(0, 1, &dispatch(0, "reduce_sum"), &[])
        .unwrap();
    Snapshot::load(dir).unwrap()
}

/// Dispatch `index` of `kernel` with one after-buffer, argument `arg`, of
/// four zero bytes.
fn four_zero_bytes(
    index: u64,
    kernel: &str,
    arg: u32,
) -> (ditto_protocol::Dispatch, crate::store::CapturedBuffer) {
    (
        dispatch(index, kernel),
        four_bytes(arg, Phase::After, DType::U8, vec![0; 4]),
    )
}

#[test]
fn with_several_kernels_dispatches_pair_only_with_the_same_kernel() {
    use crate::store::SnapshotWriter;
    let write = |dir: &std::path::Path, kernels: [&str; 2]| {
        let mut w = SnapshotWriter::create(dir, "scale_values").unwrap();
        for (index, mangled) in kernels.iter().enumerate() {
            let (d, buffer) = four_zero_bytes(index as u64, mangled, 1);
            w.add_dispatch(0, 1, &d, &[buffer]).unwrap();
        }
        Snapshot::load(dir).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let a = write(&dir.path().join("a"), ["kf", "kd"]);
    let b = write(&dir.path().join("b"), ["kd", "kf"]);
    let same = write(&dir.path().join("c"), ["kf", "kd"]);
    let err = compare_snapshots(&a, &b, &defaults())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("dispatch 0: the reference ran kf but the optimized run ran kd"),
        "{err}"
    );
    assert_eq!(
        compare_snapshots(&a, &same, &defaults())
            .unwrap()
            .arrays
            .len(),
        2
    );
}

/// A snapshot of one reduce_sum dispatch with the given (arg, phase, f32 value) buffers.
fn snapshot_with(dir: &std::path::Path, buffers: &[(u32, Phase, f32)]) -> Snapshot {
    let mut w = crate::store::SnapshotWriter::create(dir, "reduce_sum").unwrap();
    let captured: Vec<_> = buffers
        .iter()
        .map(|&(arg, phase, value)| {
            four_bytes(arg, phase, DType::F32, value.to_le_bytes().to_vec())
        })
        .collect();
    w.add_dispatch(0, 1, &dispatch(0, "reduce_sum"), &captured)
        .unwrap();
    Snapshot::load(dir).unwrap()
}

#[test]
fn before_and_after_arrays_pair_by_tensor_name_and_differing_captures_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let both = [(0, Phase::Before, 1.5), (1, Phase::After, 2.0)];
    let r = snapshot_with(&dir.path().join("r"), &both);
    assert_eq!(r.manifest.dispatches[0].buffers[0].tensor, "arg0.before");
    assert_eq!(r.manifest.dispatches[0].buffers[0].phase, Phase::Before);
    let o = snapshot_with(
        &dir.path().join("o"),
        &[(0, Phase::Before, 1.5), (1, Phase::After, 9.0)],
    );
    let report = compare_snapshots(&r, &o, &defaults()).unwrap();
    let seen: Vec<(u32, Phase, u64)> = report
        .arrays
        .iter()
        .map(|a| (a.arg, a.phase, a.stats.mismatched_elements))
        .collect();
    assert_eq!(seen, vec![(0, Phase::Before, 0), (1, Phase::After, 1)]);
    let outputs_only = snapshot_with(&dir.path().join("x"), &[(1, Phase::After, 2.0)]);
    let err = compare_snapshots(&r, &outputs_only, &defaults())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("captured arg0.before, arg1 but the optimized run captured arg1"),
        "{err}"
    );
    assert!(err.contains("same --capture"), "{err}");
}

#[test]
fn dispatches_without_buffers_are_an_error_not_a_pass() {
    // An extern "C" kernel run without --arg-types captures dispatches with no
    // buffers: comparing nothing must not read as "valid".
    let (r, o) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let err = compare_snapshots(
        &snapshot_without_buffers(r.path()),
        &snapshot_without_buffers(o.path()),
        &defaults(),
    )
    .unwrap_err();
    assert!(
        matches!(err, CompareError::NothingCompared { dispatches: 1, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("--arg-types") && msg.contains("reduce_sum"),
        "{msg}"
    );
}

#[test]
fn infinite_or_nan_tolerances_are_refused_with_a_reason() {
    // inf × 0 is NaN: `--atol 0 --rtol inf` would fail identical data.
    for (atol, rtol) in [
        (0.0, f64::INFINITY),
        (f64::INFINITY, 0.0),
        (f64::NAN, 1e-3),
        (1e-3, -1.0),
    ] {
        let e = CompareOptions::new(Some(atol), Some(rtol), false).unwrap_err();
        assert!(
            e.to_string().contains("finite, non-negative"),
            "--atol {atol} --rtol {rtol}: {e}"
        );
    }
    assert!(CompareOptions::new(Some(0.0), Some(1e30), false).is_ok());
}

#[test]
fn unequal_dispatch_counts_say_which_process_dispatched_how_often() {
    use crate::store::SnapshotWriter;
    // (command line, dispatches) per process, in rank order.
    let write = |dir: &std::path::Path, processes: &[(&str, u64)]| {
        let mut w = SnapshotWriter::create(dir, "k").unwrap();
        for (pid, (command, count)) in processes.iter().enumerate() {
            let rank = w
                .add_run(&ditto_protocol::Hello {
                    version: ditto_protocol::PROTOCOL_VERSION,
                    pid: 100 + pid as u32,
                    run: "run".into(),
                    kernel_query: "k".into(),
                    command_line: command.split(' ').map(String::from).collect(),
                    working_directory: "/".into(),
                    rank: None,
                    api: ditto_protocol::Api::Cuda,
                })
                .unwrap();
            for index in 0..*count {
                let (d, buffer) = four_zero_bytes(index, "k", 0);
                w.add_dispatch(rank, 100 + pid as u32, &d, &[buffer])
                    .unwrap();
            }
        }
        Snapshot::load(dir).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    // A cold torch.compile cache: its compile worker launched the kernel
    // while benchmarking it, in the reference only.
    let reference = write(
        &dir.path().join("ref"),
        &[
            ("python3 model.py", 1),
            ("python3 compile_worker/__main__.py", 14),
        ],
    );
    let optimized = write(
        &dir.path().join("opt"),
        &[
            ("python3 model.py", 1),
            ("python3 compile_worker/__main__.py", 0),
        ],
    );
    let err = compare_snapshots(&reference, &optimized, &defaults())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("captured 15 dispatch(es) of k but the optimized run")
            && err.contains(
                "per process, reference against optimized: rank 1 (python3 \
                 compile_worker/__main__.py): 14 against 0 (a process"
            )
            && !err.contains("rank 0 ("),
        "{err}"
    );
}

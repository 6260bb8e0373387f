"""ditto.compare and ditto.validate against the CPU runtime."""

import pytest

import ditto


@pytest.fixture(scope="module")
def reduce_sum_snapshots(apps):
    capture = ditto.Ditto(kernel="reduce_sum").capture
    return {
        name: capture([apps / f"reduce_sum_{name}"])
        for name in ("baseline", "optimized", "wrong")
    }


def test_optimized_reduce_sum_is_valid(reduce_sum_snapshots):
    r = ditto.compare(reduce_sum_snapshots["baseline"], reduce_sum_snapshots["optimized"])
    assert r.valid and bool(r)
    assert r.mismatches == []
    assert r.dispatches_compared == 1 and len(r.arrays) == 1
    assert r.summary().startswith("PASS")


def test_wrong_reduce_sum_mismatches_on_argument_1_with_the_cli_summary(reduce_sum_snapshots):
    r = ditto.compare(reduce_sum_snapshots["baseline"], reduce_sum_snapshots["wrong"])
    assert not r.valid
    (m,) = r.mismatches
    assert (m["arg"], m["dispatch"], m["mismatched_elements"], m["total_elements"]) == (1, 0, 1, 1)
    assert m["max_abs_diff"] == 98301.5
    assert "FAIL" in r.summary() and "Mismatched elements: 1 / 1" in r.summary()


def test_tolerances_are_passed_to_the_engine(reduce_sum_snapshots):
    loose = ditto.compare(
        reduce_sum_snapshots["baseline"], reduce_sum_snapshots["wrong"], atol=1e6, rtol=0.0
    )
    assert loose.valid
    assert loose.data["tolerance"] == {"atol": 1e6, "rtol": 0.0}
    with pytest.raises(ditto.DittoError, match="atol and rtol together"):
        ditto.compare(reduce_sum_snapshots["baseline"], reduce_sum_snapshots["wrong"], atol=1.0)


def test_snapshot_directories_compare_like_snapshots(reduce_sum_snapshots):
    r = ditto.compare(reduce_sum_snapshots["baseline"].dir, str(reduce_sum_snapshots["optimized"].dir))
    assert r.valid


def test_structural_differences_raise_with_the_cli_message(apps, reduce_sum_snapshots):
    other = ditto.Ditto(kernel="scale_values<float>").capture([apps / "scale_values", "float", "8"])
    with pytest.raises(ditto.DittoError) as err:
        ditto.compare(reduce_sum_snapshots["baseline"], other)
    assert "reduce_sum" in str(err.value)


def test_validate_runs_both_commands_and_reports_like_the_cli(apps, tmp_path):
    ok = ditto.validate("reduce_sum", [apps / "reduce_sum_baseline"], [apps / "reduce_sum_optimized"])
    assert ok.valid
    bad = ditto.validate(
        "reduce_sum", [apps / "reduce_sum_baseline"], [apps / "reduce_sum_wrong"], keep=tmp_path / "k"
    )
    assert not bad.valid and bad.mismatches[0]["arg"] == 1
    kept = ditto.Snapshot.load(tmp_path / "k" / "ref")
    assert kept[0][1].shape == (1,)


def test_validate_of_a_kernel_never_dispatched_raises(apps):
    with pytest.raises(ditto.KernelNotDispatched, match="reduce_sum"):
        ditto.validate("reduce_summ", [apps / "reduce_sum_baseline"], [apps / "reduce_sum_optimized"])


def test_a_renamed_kernel_validates_with_opt_kernel_and_carries_the_timing(apps, tmp_path):
    result = ditto.validate(
        "reduce_sum",
        [apps / "reduce_sum_baseline"],
        [apps / "reduce_sum_renamed"],
        opt_kernel="reduce_sum_v2",
        keep=tmp_path / "k",
    )
    assert result.valid
    assert result.optimized_kernel == "reduce_sum_v2(float const*, float*, int)"
    times = result.timing["dispatches"][0]
    assert times["reference_ns"] > 0 and times["optimized_ns"] > 0
    assert result.speedup == pytest.approx(times["reference_ns"] / times["optimized_ns"])
    assert result.summary().endswith(f"timing: {result.timing['summary']}\n")
    # compare picks the renamed kernel's dispatches the same way.
    again = ditto.compare(tmp_path / "k" / "ref", tmp_path / "k" / "opt", opt_kernel="reduce_sum_v2")
    assert again.valid and again.optimized_kernel == result.optimized_kernel


def test_a_kernel_regex_captures_the_kernel_it_matches(apps):
    snap = ditto.Ditto(kernel="re:^reduce_sum_v[0-9]").capture([apps / "reduce_sum_renamed"])
    assert len(snap) == 1


def test_a_sub_allocated_output_is_compared_by_what_the_kernels_wrote(apps):
    # The caching allocator's output lies inside a 1 MiB pool; the second
    # tensor after it differs between the runs (--tail), and is not the kernel's.
    app = str(apps / "caching_allocator")
    ok = ditto.validate("scale_add", [app], [app, "--tail", "8"])
    assert ok.valid, ok.summary()
    (array,) = ok.written
    assert array["arg"] == 2 and array["written"]["compared"] == 1000
    assert ok.outside_comparison == (1 << 20) // 4 - 2 * 1024 - 1000
    assert ok.written_by_one_side("optimized") == []
    # A planted out-of-bounds write of 8 elements by the optimized build.
    bad = ditto.validate("scale_add", [app], [app, "--write", "1008"])
    assert not bad.valid
    assert bad.written_by_one_side("optimized") == [
        {"rank": 0, "dispatch": 0, "arg": 2, "name": None, "count": 8,
         "runs": [[1000, 1007]], "past_the_other": True}
    ]
    assert bad.written_by_one_side("reference") == []
    with pytest.raises(ValueError, match="side"):
        bad.written_by_one_side("both")

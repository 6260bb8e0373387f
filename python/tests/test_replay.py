"""ditto.replay against the CPU runtime, with the hipcc-built programs."""

import pytest

import ditto


@pytest.fixture(scope="module")
def hip_apps(apps):
    directory = apps / "hip"
    if not (directory / "reduce_sum_baseline").exists():
        pytest.fail(f"{directory} has no hipcc-built programs: run `cargo build --workspace` first")
    return directory


@pytest.fixture(scope="module")
def replayable(hip_apps):
    return ditto.Ditto(kernel="reduce_sum", hsa_runtime="cpu").capture(
        [hip_apps / "reduce_sum_baseline"], capture="replay"
    )


def test_the_captured_kernel_replays_to_the_application_s_outputs(replayable):
    r = ditto.replay(replayable, iterations=2, atol=0.0, rtol=0.0, hsa_runtime="cpu")
    assert r.valid and r.mismatches == []
    assert len(r.replay["times_ns"]) == 2 and r.replay["median_ns"] > 0
    assert r.replay["relocated"] == []


def test_a_replacement_is_judged_with_a_speedup(replayable, hip_apps):
    wrong = ditto.replay(replayable, from_program=hip_apps / "reduce_sum_wrong", hsa_runtime="cpu")
    assert not wrong.valid
    (m,) = wrong.mismatches
    assert (m["arg"], m["max_abs_diff"]) == (1, 98301.5)
    assert wrong.replay["original_reproduced"] is True
    fast = ditto.replay(replayable, from_program=hip_apps / "reduce_sum_optimized", hsa_runtime="cpu")
    assert fast.valid
    assert fast.replay["speedup"] == pytest.approx(
        fast.replay["original_median_ns"] / fast.replay["median_ns"]
    )


def test_a_snapshot_without_replay_data_raises_with_the_cli_message(hip_apps):
    plain = ditto.Ditto(kernel="reduce_sum", hsa_runtime="cpu").capture([hip_apps / "reduce_sum_baseline"])
    with pytest.raises(ditto.DittoError, match="without replay data"):
        ditto.replay(plain, hsa_runtime="cpu")

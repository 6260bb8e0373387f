"""Ditto.capture and Snapshot.load against the CPU runtime."""

import numpy as np
import pytest

import ditto
from ditto import snapshot as snapshot_module


def test_capture_returns_both_arrays_of_scale_values_with_their_launch(apps):
    snap = ditto.Ditto(kernel="scale_values<float>").capture([apps / "scale_values", "float", "16"])
    assert snap.kernel == "void scale_values<float>(float*, float*, float, int)"
    assert len(snap) == 1
    d = snap[0]
    assert (d.rank, d.index) == (0, 0)
    assert d.grid == [16, 1, 1] and d.block == [256, 1, 1] or d.grid[0] >= 16
    assert isinstance(d.duration_ns, int) and d.duration_ns > 0
    assert [(a.arg, a.tensor, a.phase, a.dtype) for a in d.args] == [
        (0, "arg0", "after", "float32"),
        (1, "arg1", "after", "float32"),
    ]
    np.testing.assert_array_equal(d[0], np.arange(16, dtype=np.float32))
    np.testing.assert_array_equal(d[1], 2 * np.arange(16, dtype=np.float32))
    assert d[1].dtype == np.float32
    assert set(d.arrays) == {"arg0", "arg1"}
    with pytest.raises(KeyError, match="no captured array 5"):
        d[5]


def test_a_dispatch_selection_keeps_the_real_indices(apps):
    snap = ditto.Ditto(kernel="scale_values").capture([apps / "scale_twice"], dispatch="1")
    assert [d.index for d in snap] == [1]


def test_float16_arrays_load_as_numpy_float16(apps):
    snap = ditto.Ditto(kernel="scale_values<_Float16>").capture([apps / "scale_values", "half", "8"])
    out = snap[0][1]
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, 2 * np.arange(8, dtype=np.float16))


def _bf16_bits(values):
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def test_bfloat16_arrays_are_raw_bits_without_ml_dtypes(apps, monkeypatch):
    monkeypatch.setattr(snapshot_module, "bfloat16_dtype", lambda: None)
    snap = ditto.Ditto(kernel="scale_values<__hip_bfloat16>").capture(
        [apps / "scale_values", "bfloat16", "8"]
    )
    a = snap[0].args[1]
    assert a.dtype == "bfloat16"
    assert a.array.dtype == np.uint16
    np.testing.assert_array_equal(a.array, _bf16_bits(2 * np.arange(8)))


def test_bfloat16_arrays_are_ml_dtypes_bfloat16_when_installed(apps):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    snap = ditto.Ditto(kernel="scale_values<__hip_bfloat16>").capture(
        [apps / "scale_values", "bfloat16", "8"]
    )
    out = snap[0][1]
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.astype(np.float32), 2 * np.arange(8, dtype=np.float32))


def test_a_capture_written_to_a_directory_loads_again(apps, tmp_path):
    out = tmp_path / "snap"
    ditto.Ditto(kernel="scale_values<double>").capture([apps / "scale_values", "double", "4"], out=out)
    again = ditto.Snapshot.load(out)
    np.testing.assert_array_equal(again[0][1], np.array([0.0, 2.0, 4.0, 6.0]))
    assert again[0][1].dtype == np.float64


def test_a_kernel_never_dispatched_raises_and_lists_what_ran(apps):
    with pytest.raises(ditto.KernelNotDispatched) as err:
        ditto.Ditto(kernel="scale_valuez").capture([apps / "scale_values", "float", "8"])
    assert "scale_values<float>" in str(err.value)
    assert err.value.exit_code == 2


def test_a_missing_snapshot_directory_is_an_error_naming_it(tmp_path):
    with pytest.raises(ditto.DittoError, match="no manifest.json"):
        ditto.Snapshot.load(tmp_path / "nowhere")


def test_a_bad_ditto_bin_is_an_error_saying_what_to_do(apps, monkeypatch, tmp_path):
    monkeypatch.setenv("DITTO_BIN", str(tmp_path / "missing-ditto"))
    with pytest.raises(ditto.DittoError, match="DITTO_BIN=.* is not an executable"):
        ditto.Ditto(kernel="scale_values").capture([apps / "scale_values", "float"])


def test_dispatches_only_the_journal_has_are_loaded(apps, tmp_path):
    # A collector killed between manifest writes leaves the newest dispatches
    # in dispatches.jsonl only (and perhaps a last line cut short).
    import json

    out = tmp_path / "snap"
    ditto.Ditto(kernel="scale_values").capture([apps / "scale_twice"], out=out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [d["index"] for d in manifest["dispatches"]] == [0, 1]
    manifest["dispatches"] = manifest["dispatches"][:1]
    (out / "manifest.json").write_text(json.dumps(manifest))
    with open(out / "dispatches.jsonl", "ab") as journal:
        journal.write(b'{"rank": 0, "ind')
    snap = ditto.Snapshot.load(out)
    assert [d.index for d in snap] == [0, 1]
    assert snap[1][1].shape == snap[0][1].shape


def test_dispatches_not_captured_are_listed_with_their_reason(apps, tmp_path):
    import json

    out = tmp_path / "snap"
    snap = ditto.Ditto(kernel="scale_values").capture([apps / "scale_twice"], dispatch="1", out=out)
    assert [d.index for d in snap] == [1]
    assert [(m["index"], m["count"], m["arg"], m["reason"]) for m in snap.missing] == [(0, 1, None, "selection")]
    # A timeout the journal has and the manifest does not yet: it wins over
    # the dispatch stored for the same index, as in the collector.
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["missing"] = []
    (out / "manifest.json").write_text(json.dumps(manifest))
    timeout = {"rank": 0, "pid": 1, "index": 1, "count": 1, "arg": None, "phase": None,
               "reason": "timeout", "detail": "no Ack"}
    with open(out / "dispatches.jsonl", "a") as journal:
        journal.write(json.dumps({"missing": timeout}) + "\n")
    reloaded = ditto.Snapshot.load(out)
    assert len(reloaded) == 0
    assert [(m["index"], m["reason"]) for m in reloaded.missing] == [(0, "selection"), (1, "timeout")]


def test_a_run_of_one_collector_per_node_loads_every_rank_from_its_part(apps, tmp_path):
    """A run directory of two parts, as two nodes' collectors write it
    (`ditto collect --node`): each part a snapshot of its node's rank; the
    run loads as one, each array from its rank's part."""
    run = tmp_path / "run"
    for node, rank, n in (("a", 0, 8), ("b", 1, 12)):
        ditto.Ditto(kernel="scale_values<float>").capture(
            [apps / "scale_values", "float", str(n)],
            out=run / f"node-{node}",
            env={"OMPI_COMM_WORLD_RANK": str(rank)},
        )
    snap = ditto.Snapshot.load(run)
    assert [(r["rank"], r["node"]) for r in snap.runs] == [(0, "a"), (1, "b")]
    assert [(d.rank, len(d["arg1"])) for d in snap] == [(0, 8), (1, 12)]
    np.testing.assert_array_equal(snap[1]["arg1"], np.arange(12, dtype=np.float32) * 2)
    assert snap[1].file == run / "node-b" / "dispatch-1-00000.safetensors"

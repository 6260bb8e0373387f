"""Snapshot.load refuses files that are not the snapshot's own: a FIFO, a
symbolic link, a name that leads out of the directory, a tensor whose
header disagrees with the manifest, bytes whose fingerprint is not the
recorded one. Each snapshot is a real capture (fingerprints written by the
collector), damaged afterwards."""

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import ditto
from ditto import snapshot as snapshot_module

# The package under test, for the loads run in a child process.
PACKAGE_ROOT = Path(ditto.__file__).resolve().parents[1]

# Loads the snapshot in argv[1] and every array of its first dispatch;
# exit 3 with the error on DittoError.
LOAD_ALL = """
import sys, ditto
try:
    snap = ditto.Snapshot.load(sys.argv[1])
    for d in snap:
        d.args
except ditto.DittoError as e:
    print(e)
    sys.exit(3)
print("loaded", len(snap))
"""


def load_in_child(directory, timeout=30):
    """Snapshot.load and every array in a child process, so that a load
    that hangs fails this test (after `timeout` s) instead of hanging it."""
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT))
    try:
        return subprocess.run(
            [sys.executable, "-c", LOAD_ALL, str(directory)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"loading {directory} hung ({timeout} s)")


def capture(apps, out, n=8):
    ditto.Ditto(kernel="scale_values<float>").capture([apps / "scale_values", "float", str(n)], out=out)
    manifest = json.loads((out / "manifest.json").read_text())
    (record,) = manifest["dispatches"]
    return manifest, record


def header_of(path):
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def write_with_header(path, header, body):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + body)


def test_a_fifo_as_dispatch_file_is_refused_at_once(apps, tmp_path):
    out = tmp_path / "snap"
    _, record = capture(apps, out)
    dispatch_file = out / record["file"]
    dispatch_file.unlink()
    os.mkfifo(dispatch_file)
    done = load_in_child(out)
    assert done.returncode == 3, done
    message = done.stdout
    assert record["file"] in message and str(out) in message, message
    assert "a FIFO, not a regular file" in message, message


def test_a_fifo_as_journal_is_refused_at_once(apps, tmp_path):
    out = tmp_path / "snap"
    capture(apps, out)
    (out / "dispatches.jsonl").unlink()
    os.mkfifo(out / "dispatches.jsonl")
    done = load_in_child(out)
    assert done.returncode == 3, done
    assert "dispatches.jsonl" in done.stdout and "a FIFO, not a regular file" in done.stdout, done


def test_a_symlink_to_a_file_outside_the_snapshot_is_refused(apps, tmp_path):
    out = tmp_path / "snap"
    _, record = capture(apps, out)
    dispatch_file = out / record["file"]
    outside = tmp_path / "outside.safetensors"
    dispatch_file.rename(outside)
    dispatch_file.symlink_to(outside)
    snap = ditto.Snapshot.load(out)
    with pytest.raises(ditto.DittoError) as err:
        snap[0].args
    message = str(err.value)
    assert record["file"] in message and str(out) in message, message
    assert "a symbolic link" in message, message


@pytest.mark.parametrize("where", ["manifest", "journal"])
@pytest.mark.parametrize("name", ["../../x.safetensors", "ABSOLUTE", "", ".hidden.safetensors"])
def test_a_dispatch_file_named_outside_the_snapshot_is_refused(apps, tmp_path, where, name):
    out = tmp_path / "a" / "snap"
    manifest, record = capture(apps, out)
    # A valid tensor file where the name leads, so only the name is wrong.
    if name == "ABSOLUTE":
        name = str(tmp_path / "abs.safetensors")
    target = out / name if name else None
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((out / record["file"]).read_bytes())
    named = dict(record, file=name)
    if where == "manifest":
        manifest["dispatches"] = [named]
    else:
        manifest["dispatches"] = []
        (out / "dispatches.jsonl").write_text(json.dumps(named) + "\n")
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ditto.DittoError) as err:
        for d in ditto.Snapshot.load(out):
            d.args
    message = str(err.value)
    assert f"names the file {name!r}" in message, message
    assert "not a file of this snapshot directory" in message and str(out) in message, message


@pytest.mark.parametrize(
    "change, said",
    [
        ({"dtype": "I32"}, "I32[8] but the manifest says float32 (F32[8])"),
        ({"shape": [2, 4]}, "F32[2, 4] but the manifest says float32 (F32[8])"),
    ],
)
def test_a_tensor_header_unlike_the_manifest_is_refused(apps, tmp_path, change, said):
    out = tmp_path / "snap"
    _, record = capture(apps, out)
    path = out / record["file"]
    header, body = header_of(path)
    header["arg1"].update(change)
    write_with_header(path, header, body)
    with pytest.raises(ditto.DittoError) as err:
        ditto.Snapshot.load(out)[0].args
    message = str(err.value)
    assert said in message, message
    assert "dispatch 0 of rank 0" in message and "tensor arg1" in message, message
    assert record["file"] in message and str(out) in message, message


def test_a_flipped_byte_fails_the_fingerprint(apps, tmp_path):
    out = tmp_path / "snap"
    _, record = capture(apps, out, n=16)
    path = out / record["file"]
    header, body = header_of(path)
    start, _ = header["arg1"]["data_offsets"]
    data = bytearray(path.read_bytes())
    data[len(data) - len(body) + start + 5] ^= 0x10
    path.write_bytes(bytes(data))
    (expected,) = [b["fingerprint"] for b in record["buffers"] if b["tensor"] == "arg1"]
    snap = ditto.Snapshot.load(out)
    with pytest.raises(ditto.DittoError) as err:
        snap[0].args
    message = str(err.value)
    assert "dispatch 0 of rank 0, argument 1 (tensor arg1)" in message, message
    assert record["file"] in message and str(out) in message, message
    assert f"the manifest records fingerprint {expected:016x}" in message, message
    seen = snapshot_module.fingerprint(bytes(data[len(data) - len(body) + start :][: 16 * 4]))
    assert seen != expected and f"its bytes have {seen:016x}" in message, message


def test_an_undamaged_capture_loads_with_every_check(apps, tmp_path):
    out = tmp_path / "snap"
    capture(apps, out, n=5000)  # 20,000 bytes: the fingerprint reads windows
    done = load_in_child(out)
    assert (done.returncode, done.stdout.strip()) == (0, "loaded 1"), done


def pattern(n):
    """Bytes (7 i + 3) mod 256: the same inputs as the protocol crate's test
    `fingerprint_of_fixed_inputs_is_pinned_for_the_python_port`."""
    return bytes((7 * i + 3) % 256 for i in range(n))


@pytest.mark.parametrize(
    "n, expected",
    [
        (0, 0xB2C9ADD9E51470CD),
        (1, 0x37DFA922FAC8BE34),
        (100, 0x7FB67F77E416CBF2),
        (4096, 0x517580BAF9B678F9),
        (4097, 0x53729E27ABADB3E7),
        (10000, 0x0516F58F94492535),
        ((1 << 20) + 13, 0x1851224D11E80442),
    ],
)
def test_fingerprint_equals_the_rust_function(n, expected):
    assert snapshot_module.fingerprint(pattern(n)) == expected


def test_legacy_fingerprint_equals_the_rust_function():
    # The same values as crates/protocol/src/fingerprint.rs's
    # the_fingerprint_of_older_snapshots_is_fnv_1a_over_the_length_and_windows.
    assert snapshot_module.legacy_fingerprint(b"") == 0xA8C7F832281A39C5
    assert snapshot_module.legacy_fingerprint(b"abc") == 0xC11AB6D2519BC2B2

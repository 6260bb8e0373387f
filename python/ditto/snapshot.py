"""Snapshot directories as Python objects: the manifest, each captured
dispatch, and its arrays as numpy arrays.

Owns reading what `ditto run` / `ditto collect` wrote (manifest.json and one
safetensors file per dispatch); it never writes and never compares.
bfloat16 arrays are returned as `ml_dtypes.bfloat16` when ml_dtypes is
installed, else as their raw bits (`numpy.uint16`), since numpy has no
bfloat16 of its own.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Union

import numpy as np
from safetensors import safe_open

from ._cli import DittoError

MANIFEST = "manifest.json"
JOURNAL = "dispatches.jsonl"


def _with_journal(directory: Path, manifest: dict) -> dict:
    """Adds the dispatches only the journal has (the collector writes
    manifest.json now and then, the journal line by line; a last line cut
    short by a crash is ignored)."""
    try:
        text = (directory / JOURNAL).read_bytes()
    except FileNotFoundError:
        return manifest
    end = text.rfind(b"\n")
    known = {(d["rank"], d["index"]) for d in manifest.get("dispatches", [])}
    for n, line in enumerate(text[: max(end, 0)].split(b"\n")):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DittoError(f"{directory / JOURNAL}: line {n + 1}: {e}") from None
        if "missing" in record:
            _merge_missing(manifest, record["missing"])
        elif (record["rank"], record["index"]) not in known:
            manifest.setdefault("dispatches", []).append(record)
            if not manifest.get("kernel"):
                manifest["kernel"] = record.get("kernel")
    _drop_covered(manifest)
    return manifest


def _covers(missing: dict, rank: int, index: int) -> bool:
    """Whether a missing record says the whole dispatch (rank, index) was not captured."""
    return (
        missing.get("arg") is None
        and missing["rank"] == rank
        and missing["index"] <= index < missing["index"] + missing["count"]
    )


def _merge_missing(manifest: dict, record: dict) -> None:
    """The collector's rules: a later record for one whole dispatch replaces
    an earlier one; a whole-dispatch record wins over a stored dispatch."""
    missing = manifest.setdefault("missing", [])
    if record in missing:
        return
    if record.get("arg") is None and record["count"] == 1:
        missing[:] = [
            m
            for m in missing
            if not (m.get("arg") is None and m["count"] == 1 and _covers(m, record["rank"], record["index"]))
        ]
    missing.append(record)
    missing.sort(key=lambda m: (m["rank"], m["index"], m.get("arg") is not None, m.get("arg") or 0))


def _drop_covered(manifest: dict) -> None:
    missing = manifest.get("missing", [])
    manifest["dispatches"] = [
        d for d in manifest.get("dispatches", []) if not any(_covers(m, d["rank"], d["index"]) for m in missing)
    ]


def bfloat16_dtype() -> Optional[np.dtype]:
    """numpy's view of bfloat16 through ml_dtypes, or None without it."""
    try:
        import ml_dtypes  # noqa: PLC0415 (optional dependency)
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def _read_raw_tensor(path: Path, name: str) -> np.ndarray:
    """The bytes of one tensor (safetensors: u64 header length, JSON header,
    data), as uint8; for dtypes numpy cannot name."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        if name not in header:
            raise DittoError(f"{path}: has no tensor {name!r} although the manifest lists it")
        start, end = header[name]["data_offsets"]
        f.seek(8 + header_len + start)
        data = f.read(end - start)
    if len(data) != end - start:
        raise DittoError(f"{path}: tensor {name!r} is cut short ({len(data)} of {end - start} bytes)")
    return np.frombuffer(data, dtype=np.uint8)


@dataclass
class CapturedArray:
    """One captured pointer argument of one dispatch."""

    arg: int
    """Position of the argument in the kernel's parameter list."""
    tensor: str
    """Name in the dispatch's file: `arg1`, or `arg0.before` for inputs."""
    phase: str
    """`after` (the kernel ran) or `before` (inputs, with capture="inputs,outputs")."""
    dtype: str
    """ditto's element type: float32, float16, bfloat16, int32, ..., bytes."""
    name: Optional[str]
    """The parameter's name in the source, when the code object carries it."""
    array: np.ndarray
    record: dict = field(repr=False)
    """The buffer's manifest entry (allocation, offset, extent, transport...)."""


@dataclass
class Dispatch:
    """One captured dispatch of the kernel."""

    rank: int
    index: int
    pid: int
    kernel: str
    mangled: str
    grid: List[int]
    block: List[int]
    duration_ns: Optional[int]
    """Kernel execution time from the runtime's profiling timestamps."""
    file: Path
    record: dict = field(repr=False)
    _arrays: Optional[List[CapturedArray]] = field(default=None, repr=False)

    @property
    def args(self) -> List[CapturedArray]:
        """Every captured array, in manifest order (loaded on first use)."""
        if self._arrays is None:
            self._arrays = [self._load(b) for b in self.record.get("buffers", [])]
        return self._arrays

    @property
    def arrays(self) -> Dict[str, np.ndarray]:
        """Arrays by tensor name (`arg1`, `arg0.before`)."""
        return {a.tensor: a.array for a in self.args}

    def __getitem__(self, key: Union[int, str]) -> np.ndarray:
        """`d[1]`: argument 1 after the kernel; `d["arg0.before"]` or a
        parameter name: that array."""
        for a in self.args:
            if (isinstance(key, int) and a.arg == key and a.phase == "after") or (
                isinstance(key, str) and key in (a.tensor, a.name)
            ):
                return a.array
        captured = ", ".join(a.tensor for a in self.args) or "nothing"
        raise KeyError(f"dispatch {self.index} has no captured array {key!r} (captured: {captured})")

    def _load(self, b: dict) -> CapturedArray:
        dtype = b["dtype"]
        if dtype == "bfloat16":
            raw = _read_raw_tensor(self.file, b["tensor"]).view(np.uint16)
            bf16 = bfloat16_dtype()
            array = raw.view(bf16) if bf16 is not None else raw
        else:
            with safe_open(str(self.file), framework="numpy") as f:
                array = f.get_tensor(b["tensor"])
        return CapturedArray(
            arg=int(b["arg"]),
            tensor=b["tensor"],
            phase=b.get("phase", "after"),
            dtype=dtype,
            name=b.get("name"),
            array=array,
            record=b,
        )


class Snapshot:
    """A snapshot directory: what one or more application processes
    captured of one kernel."""

    def __init__(self, directory: Union[str, os.PathLike], manifest: dict, keep_alive: object = None):
        self.dir = Path(directory)
        self.manifest = manifest
        kernel = manifest.get("kernel") or {}
        self.kernel: Optional[str] = kernel.get("demangled")
        self.mangled: Optional[str] = kernel.get("mangled")
        self.kernel_query: str = manifest.get("kernel_query", "")
        self.runs: List[dict] = manifest.get("runs", [])
        self.dispatched_kernels: List[dict] = manifest.get("dispatched_kernels", [])
        # Dispatches (or buffers) matched but not captured: rank, pid, index,
        # count, arg (None: whole dispatches), phase, reason, detail.
        self.missing: List[dict] = manifest.get("missing", [])
        self.dispatches: List[Dispatch] = [
            Dispatch(
                rank=int(d["rank"]),
                index=int(d["index"]),
                pid=int(d["pid"]),
                kernel=(d.get("kernel") or kernel).get("demangled", ""),
                mangled=(d.get("kernel") or kernel).get("mangled", ""),
                grid=list(d["grid"]),
                block=list(d["block"]),
                duration_ns=d.get("duration_ns"),
                file=self.dir / d["file"],
                record=d,
            )
            for d in manifest.get("dispatches", [])
        ]
        # A temporary directory made by capture() lives as long as this object.
        self._keep_alive = keep_alive

    @classmethod
    def load(cls, directory: Union[str, os.PathLike]) -> "Snapshot":
        path = Path(directory) / MANIFEST
        try:
            manifest = json.loads(path.read_text())
        except FileNotFoundError:
            raise DittoError(f"{directory} is not a ditto snapshot directory: it has no {MANIFEST}") from None
        except json.JSONDecodeError as e:
            raise DittoError(f"{path} is not valid JSON: {e}") from None
        return cls(directory, _with_journal(Path(directory), manifest))

    def __len__(self) -> int:
        return len(self.dispatches)

    def __iter__(self) -> Iterator[Dispatch]:
        return iter(self.dispatches)

    def __getitem__(self, i: int) -> Dispatch:
        return self.dispatches[i]

    def __repr__(self) -> str:
        return f"Snapshot({str(self.dir)!r}, kernel={self.kernel!r}, dispatches={len(self.dispatches)})"

"""Snapshot directories as Python objects: the manifest, each captured
dispatch, and its arrays as numpy arrays.

What a snapshot holds is the Rust reader's word, never a second copy of its
rules: `Snapshot.load` runs `ditto inspect DIR --json --manifest`, which
prints the manifest as the CLI's reader completed it from the journal
(dispatches only dispatches.jsonl has, missing records merged by the
collector's rules, dispatches a whole-dispatch missing record covers
removed; crates/snapshot/src/store/reader.rs, journal.rs, missing.rs) and
which processes left it incomplete. `ditto` is found as every function of
this package finds it (ditto/_cli.py): $DITTO_BIN, else `ditto` on PATH;
when neither is there, DittoError says to build it and set DITTO_BIN.

Owns reading the tensor bytes of each dispatch (one safetensors file per
dispatch); it never writes and never compares. It reads only regular files
of the snapshot directory itself, each opened relative to the directory
opened once (no symbolic link followed, no FIFO waited on, no file name
leading elsewhere; manifest.json and dispatches.jsonl are refused here too
before `ditto` reads them, with the same words), and checks each tensor's
header against the manifest and each buffer's bytes against the
fingerprint the collector recorded, as the CLI's reader does.
A run captured by one collector per node (`ditto collect --node`) has no
manifest of its own: its parts `node-<NAME>/` are snapshot directories,
which `ditto inspect` merges (crates/snapshot/src/store/parts.rs); each
dispatch's file is read from the part of its rank's node.
bfloat16 arrays are returned as `ml_dtypes.bfloat16` when ml_dtypes is
installed, else as their raw bits (`numpy.uint16`), since numpy has no
bfloat16 of its own.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import struct
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np

from ._cli import DittoError, run

MANIFEST = "manifest.json"
JOURNAL = "dispatches.jsonl"
# A run of one collector per node: one part per node, `node-<NAME>/`.
PART_PREFIX = "node-"

CAPTURE_AGAIN = "capture the snapshot again (ditto run or ditto collect)"


def is_own_file_name(name: object) -> bool:
    """Whether a dispatch's `file` names a file of the snapshot's own
    directory: not empty, not starting with '.', no '/'. The same rule as
    the CLI's reader (`Snapshot::load_dispatch` in
    crates/snapshot/src/store/reader.rs): change both or neither. (A NUL,
    which no file name holds, is refused here before the system call that
    would refuse it there.)"""
    return isinstance(name, str) and name != "" and not name.startswith(".") and "/" not in name and "\0" not in name


def _dispatch_label(record: dict) -> str:
    return f"dispatch {record.get('index')} of rank {record.get('rank')}"


def _check_file_name(directory: Path, record: dict, source: str) -> None:
    """Refuses a dispatch record (from `source`) whose file is not a file
    of this snapshot directory."""
    name = record.get("file")
    if not is_own_file_name(name):
        raise DittoError(
            f"{source} of snapshot {directory}: {_dispatch_label(record)} names the file {name!r}, "
            "which is not a file of this snapshot directory (a dispatch's file is a plain file name "
            f"in the snapshot's own directory); {CAPTURE_AGAIN}"
        )


_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class _Directory:
    """A snapshot directory opened once: each of its files is opened
    relative to this handle, never followed through a symbolic link, and
    only when it is a regular file (a FIFO is opened without waiting for a
    writer and then refused), so that a snapshot cannot point a reader at
    another file or hang it."""

    def __init__(self, path: Union[str, os.PathLike]):
        self.path = Path(path)
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise DittoError(f"{self.path} is not a ditto snapshot directory: it has no {MANIFEST}") from None
        except NotADirectoryError:
            raise DittoError(
                f"{self.path} is not a ditto snapshot directory: it is not a directory "
                f"(give the directory that holds {MANIFEST})"
            ) from None
        except OSError as e:
            raise DittoError(f"{self.path}: cannot open the snapshot directory: {e.strerror}") from None
        weakref.finalize(self, os.close, self.fd)

    def open(self, name: str, what: str) -> Tuple[int, os.stat_result]:
        """An open descriptor of the regular file `name` of this directory
        and its status; `what` names the file in errors (e.g. "dispatch 3
        of rank 0: its file x.safetensors"). FileNotFoundError passes
        through; everything else that is not a regular file is a
        DittoError."""
        if not is_own_file_name(name):
            raise DittoError(
                f"{what} in snapshot {self.path}: {name!r} is not a file of this snapshot directory; {CAPTURE_AGAIN}"
            )
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.fd)
        except FileNotFoundError:
            raise
        except OSError as e:
            # O_NOFOLLOW: ELOOP is the last component being a symbolic link.
            if e.errno != errno.ELOOP:
                raise DittoError(f"{what} in snapshot {self.path}: cannot open it: {e.strerror}") from None
            kind = "a symbolic link"
        else:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode):
                return fd, info
            os.close(fd)
            kind = next((k for test, k in _FILE_KINDS if test(info.st_mode)), "not a regular file")
        raise DittoError(
            f"{what} in snapshot {self.path} is {kind}, not a regular file: a reader takes only regular files "
            f"of the snapshot's own directory (it follows no link out of it and waits on no FIFO); put the "
            f"file itself there, or {CAPTURE_AGAIN}"
        )

    def parts(self) -> List[str]:
        """The names of the node parts (`node-<NAME>`) this directory
        holds, sorted; empty for a snapshot of one collector."""
        return sorted(
            n for n in os.listdir(self.fd) if n.startswith(PART_PREFIX) and len(n) > len(PART_PREFIX)
        )

    def part(self, node: str) -> "_Directory":
        """The part of node `node` in this run directory, opened."""
        name = PART_PREFIX + node
        if not is_own_file_name(name):
            raise DittoError(f"snapshot {self.path}: node {node!r} names no part of this run; {CAPTURE_AGAIN}")
        return _Directory(self.path / name)

    def check(self, name: str, what: str) -> bool:
        """Whether the regular file `name` is there (False when it is not);
        a name that is there but not a regular file is a DittoError."""
        try:
            fd, _ = self.open(name, what)
        except FileNotFoundError:
            return False
        os.close(fd)
        return True


def bfloat16_dtype() -> Optional[np.dtype]:
    """numpy's view of bfloat16 through ml_dtypes, or None without it."""
    try:
        import ml_dtypes  # noqa: PLC0415 (optional dependency)
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


_MASK = (1 << 64) - 1
_PRIME = 0x0000_0100_0000_01B3
_WINDOW = 64
_WINDOWS = 64


def _mix(h: int, word: int) -> int:
    h = ((h ^ word) * _PRIME) & _MASK
    return ((h << 29) | (h >> 35)) & _MASK


def fingerprint_windows(length: int) -> List[Tuple[int, int]]:
    """The byte ranges (start, length) of a buffer that its fingerprint
    reads: the whole buffer up to 4 KiB, else 64 windows of 64 bytes."""
    if length <= _WINDOW * _WINDOWS:
        return [(0, length)]
    last_start = length - _WINDOW
    return [(i * last_start // (_WINDOWS - 1), _WINDOW) for i in range(_WINDOWS)]


def fingerprint_of_windows(length: int, windows: Iterable[bytes]) -> int:
    """The fingerprint of a `length`-byte buffer from the bytes of its
    fingerprint_windows, in order."""
    lanes = [0xCBF29CE484222325, 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9]
    lanes[0] = _mix(lanes[0], length)
    for w in windows:
        whole = len(w) - len(w) % 32
        for block in range(0, whole, 32):
            words = struct.unpack_from("<4Q", w, block)
            for i in range(4):
                lanes[i] = _mix(lanes[i], words[i])
        for b in w[whole:]:
            lanes[0] = _mix(lanes[0], b)
        # Where one window ends and the next begins.
        lanes[1] = _mix(lanes[1], len(w))
    h = lanes[0]
    for lane in lanes[1:]:
        h = _mix(h, lane)
    return h


def fingerprint(data: Union[bytes, bytearray, memoryview, np.ndarray]) -> int:
    """The fingerprint the tool and the collector take of a buffer and the
    manifest records: a port of `ditto_protocol::fingerprint`
    (crates/protocol/src/fingerprint.rs; a multiply-rotate hash over the
    length and up to 64 windows of 64 bytes, 64-bit arithmetic wrapping).
    Pinned to the Rust function's values by both crates' tests: change both
    or neither."""
    raw = memoryview(data).cast("B")
    return fingerprint_of_windows(len(raw), (raw[s : s + n].tobytes() for s, n in fingerprint_windows(len(raw))))


def legacy_fingerprint(data: Union[bytes, bytearray, memoryview, np.ndarray]) -> int:
    """The fingerprint of snapshots written before 2026-11-30 (same format
    number): byte-at-a-time FNV-1a over the length's 8 little-endian bytes
    and the same windows. Accepted where `fingerprint` differs, as the
    CLI's reader does (`legacy_fingerprint` in
    crates/protocol/src/fingerprint.rs)."""
    raw = memoryview(data).cast("B")
    h = 0xCBF29CE484222325
    mask = (1 << 64) - 1

    def eat(chunk: bytes) -> None:
        nonlocal h
        for byte in chunk:
            h = ((h ^ byte) * 0x100000001B3) & mask

    eat(len(raw).to_bytes(8, "little"))
    for s, n in fingerprint_windows(len(raw)):
        eat(raw[s : s + n].tobytes())
    return h


# ditto's dtype name -> (safetensors dtype, numpy dtype of the elements),
# as `safetensors_dtype` in crates/snapshot/src/store/manifest.rs. bfloat16 is
# read as its bits (numpy has no bfloat16 of its own).
_DTYPES = {
    "float16": ("F16", "<f2"),
    "bfloat16": ("BF16", "<u2"),
    "float32": ("F32", "<f4"),
    "float64": ("F64", "<f8"),
    "int8": ("I8", "i1"),
    "int16": ("I16", "<i2"),
    "int32": ("I32", "<i4"),
    "int64": ("I64", "<i8"),
    "uint8": ("U8", "u1"),
    "bytes": ("U8", "u1"),
    "uint16": ("U16", "<u2"),
    "uint32": ("U32", "<u4"),
    "uint64": ("U64", "<u8"),
    "bool": ("BOOL", "?"),
}

# The largest header read (the safetensors format's own limit).
_MAX_HEADER = 100_000_000


def _is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _read_tensors(f, size: int, wanted: List[dict], where: str) -> List[np.ndarray]:
    """The bytes (uint8) of each wanted tensor (manifest buffer records) of
    the open safetensors file `f` of `size` bytes: u64 header length, JSON
    header, data. Each tensor's dtype and shape must be the manifest's, its
    data inside the file; `where` names the dispatch and file in errors."""

    def bad(reason: str) -> DittoError:
        return DittoError(f"{where}: {reason}; {CAPTURE_AGAIN}")

    if size < 8:
        raise bad(f"{size} bytes: too short for a safetensors file")
    (header_len,) = struct.unpack("<Q", f.read(8))
    if header_len > _MAX_HEADER or 8 + header_len > size:
        raise bad(f"header length {header_len} does not fit in the file's {size} bytes")
    try:
        header = json.loads(f.read(header_len))
    except (ValueError, UnicodeDecodeError) as e:
        raise bad(f"the header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise bad("the header is not a JSON object")
    data_start = 8 + header_len
    data_len = size - data_start
    out = []
    for b in wanted:
        name, dtype, elements = b.get("tensor"), b.get("dtype"), b.get("elements")
        if dtype not in _DTYPES:
            raise bad(f"tensor {name}: the manifest's dtype {dtype!r} is not one ditto writes")
        if not _is_count(elements) or b.get("shape", [elements]) != [elements]:
            raise bad(f"tensor {name}: the manifest's shape {b.get('shape')} and elements {elements!r} disagree")
        st_dtype, np_dtype = _DTYPES[dtype]
        info = header.get(name) if isinstance(name, str) and name != "__metadata__" else None
        if not isinstance(info, dict):
            raise bad(f"tensor {name} (argument {b.get('arg')}): not in the file")
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if info.get("dtype") != st_dtype or shape != [elements]:
            shown = ", ".join(map(str, shape)) if isinstance(shape, list) else repr(shape)
            raise bad(
                f"tensor {name} is {info.get('dtype')}[{shown}] but the manifest says "
                f"{dtype} ({st_dtype}[{elements}])"
            )
        expected = elements * np.dtype(np_dtype).itemsize
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets))):
            raise bad(f"tensor {name}: data offsets {offsets!r} are not two byte offsets")
        start, end = offsets
        if start > end or end > data_len or end - start != expected:
            raise bad(
                f"tensor {name} (argument {b.get('arg')}): data offsets {start}..{end} are not "
                f"{expected} bytes inside the file's {data_len} bytes of data"
            )
        data = np.empty(expected, dtype=np.uint8)
        f.seek(data_start + start)
        got = f.readinto(data)
        if got != expected:
            raise bad(f"tensor {name}: cut short ({got} of {expected} bytes)")
        out.append(data)
    return out


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
    _directory: Optional[_Directory] = field(default=None, repr=False)

    @property
    def args(self) -> List[CapturedArray]:
        """Every captured array, in manifest order (loaded on first use)."""
        if self._arrays is None:
            self._arrays = self._load()
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

    def _load(self) -> List[CapturedArray]:
        """Reads every buffer from the dispatch's file (a regular file of
        the snapshot directory), each checked against its manifest record:
        dtype, shape and the recorded fingerprint of its bytes."""
        directory = self._directory if self._directory is not None else _Directory(self.file.parent)
        name = self.record.get("file")
        label = f"{_dispatch_label(self.record)}: its file {name}"
        where = f"{label} in snapshot {directory.path}"
        buffers = self.record.get("buffers", [])
        try:
            fd, info = directory.open(name, label)
        except FileNotFoundError:
            raise DittoError(f"{where} is missing; {CAPTURE_AGAIN}") from None
        with open(fd, "rb", closefd=True) as f:
            raws = _read_tensors(f, info.st_size, buffers, where)
        out = []
        for b, raw in zip(buffers, raws):
            expected = b.get("fingerprint")
            seen = fingerprint(raw)
            if seen != expected and legacy_fingerprint(raw) != expected:
                recorded = f"fingerprint {expected:016x}" if _is_count(expected) else f"no fingerprint ({expected!r})"
                raise DittoError(
                    f"{_dispatch_label(self.record)}, argument {b.get('arg')} (tensor {b.get('tensor')}) "
                    f"in {name} of snapshot {directory.path}: the manifest records {recorded} "
                    f"but its bytes have {seen:016x}: the file was changed or damaged after it was "
                    f"captured; {CAPTURE_AGAIN}"
                )
            dtype = b["dtype"]
            array = raw.view(_DTYPES[dtype][1])
            if dtype == "bfloat16":
                bf16 = bfloat16_dtype()
                if bf16 is not None:
                    array = array.view(bf16)
            out.append(
                CapturedArray(
                    arg=int(b["arg"]),
                    tensor=b["tensor"],
                    phase=b.get("phase", "after"),
                    dtype=dtype,
                    name=b.get("name"),
                    array=array,
                    record=b,
                )
            )
        return out


class Snapshot:
    """A snapshot directory: what one or more application processes
    captured of one kernel."""

    def __init__(
        self,
        directory: Union[str, os.PathLike],
        manifest: dict,
        keep_alive: object = None,
        *,
        incomplete: Iterable[str] = (),
        _directory: Optional[_Directory] = None,
    ):
        # Every file is read relative to the directory as opened here, or
        # in a run of one collector per node, to its rank's node's part.
        self._directory = _directory if _directory is not None else _Directory(directory)
        self.dir = Path(directory)
        self.manifest = manifest
        parts: Dict[str, _Directory] = {}
        part_of_rank: Dict[int, _Directory] = {}
        for r in manifest.get("runs", []):
            node = r.get("node")
            if isinstance(node, str):
                if node not in parts:
                    parts[node] = self._directory.part(node)
                part_of_rank[int(r["rank"])] = parts[node]
        for d in manifest.get("dispatches", []):
            _check_file_name(self.dir, d, f"the manifest ({MANIFEST} with {JOURNAL})")
        kernel = manifest.get("kernel") or {}
        self.kernel: Optional[str] = kernel.get("demangled")
        self.mangled: Optional[str] = kernel.get("mangled")
        self.kernel_query: str = manifest.get("kernel_query", "")
        self.runs: List[dict] = manifest.get("runs", [])
        self.dispatched_kernels: List[dict] = manifest.get("dispatched_kernels", [])
        # Dispatches (or buffers) matched but not captured: rank, pid, index,
        # count, arg (None: whole dispatches), phase, reason, detail.
        self.missing: List[dict] = manifest.get("missing", [])
        # One line per process whose dispatches are unaccounted (its
        # connection ended without saying how many it matched).
        self.incomplete: List[str] = list(incomplete)
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
                file=part_of_rank.get(int(d["rank"]), self._directory).path / d["file"],
                record=d,
                _directory=part_of_rank.get(int(d["rank"]), self._directory),
            )
            for d in manifest.get("dispatches", [])
        ]
        # A temporary directory made by capture() lives as long as this object.
        self._keep_alive = keep_alive

    @classmethod
    def load(cls, directory: Union[str, os.PathLike]) -> "Snapshot":
        """Reads the snapshot in `directory`: its manifest as `ditto inspect
        --json --manifest` gives it; the arrays when first used."""
        opened = _Directory(directory)
        if opened.check(MANIFEST, MANIFEST):
            opened.check(JOURNAL, JOURNAL)
        elif not opened.parts():
            raise DittoError(f"{directory} is not a ditto snapshot directory: it has no {MANIFEST}")
        done = run(["inspect", "--json", "--manifest", "--", str(opened.path)])
        try:
            data = json.loads(done.stdout)
            manifest, incomplete = data["manifest"], data["incomplete"]
        except (ValueError, KeyError, TypeError) as e:
            raise DittoError(
                f"`ditto inspect {opened.path} --json --manifest` printed no manifest ({e}): is DITTO_BIN "
                "a ditto as new as this package?"
            ) from None
        return cls(directory, manifest, incomplete=incomplete, _directory=opened)

    def __len__(self) -> int:
        return len(self.dispatches)

    def __iter__(self) -> Iterator[Dispatch]:
        return iter(self.dispatches)

    def __getitem__(self, i: int) -> Dispatch:
        return self.dispatches[i]

    def __repr__(self) -> str:
        return f"Snapshot({str(self.dir)!r}, kernel={self.kernel!r}, dispatches={len(self.dispatches)})"

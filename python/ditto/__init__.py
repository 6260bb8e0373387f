"""ditto from Python: capture a GPU kernel's buffers inside an unmodified
application, load the snapshots as numpy arrays, and check that an
optimized build computes what the reference computed.

    import ditto
    snap = ditto.Ditto(kernel="reduce_sum").capture(["./reduce_sum_baseline"])
    snap[0][1]                      # argument 1 of the first dispatch, a numpy array
    result = ditto.validate("reduce_sum", ["./reduce_sum_baseline"], ["./reduce_sum_optimized"])
    print(result.summary())
    snap = ditto.Ditto(kernel="reduce_sum").capture(["./reduce_sum_baseline"], capture="replay")
    ditto.replay(snap, from_program="./reduce_sum_optimized", iterations=20).replay["speedup"]

Every function runs the `ditto` command ($DITTO_BIN, else `ditto` on PATH):
the capture and comparison engine is the CLI's, never a second copy. Its
errors become DittoError (KernelNotDispatched when the kernel never ran)
with the CLI's own message.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

from ._cli import DittoError, KernelNotDispatched, run
from .result import Result
from .snapshot import CapturedArray, Dispatch, Snapshot

__all__ = [
    "CapturedArray",
    "Ditto",
    "DittoError",
    "Dispatch",
    "KernelNotDispatched",
    "Result",
    "Snapshot",
    "compare",
    "replay",
    "validate",
]

PathLike = Union[str, os.PathLike]
SnapshotLike = Union[Snapshot, PathLike]


def _tolerance_args(atol, rtol, ulp, equal_nan) -> list:
    if (atol is None) != (rtol is None):
        raise DittoError("give atol and rtol together, or neither for the per-dtype defaults")
    args = []
    if atol is not None:
        args += ["--atol", repr(float(atol)), "--rtol", repr(float(rtol))]
    if ulp is not None:
        args += ["--ulp", str(int(ulp))]
    if equal_nan:
        args.append("--equal-nan")
    return args


def _capture_args(dispatch, capture, arg_types, arg_sizes, hsa_runtime, timeout) -> list:
    args = []
    for flag, value in (
        ("--dispatch", dispatch),
        ("--capture", capture),
        ("--arg-types", arg_types),
        ("--arg-sizes", arg_sizes),
        ("--hsa-runtime", hsa_runtime),
    ):
        if value is not None:
            args += [flag, str(value)]
    if timeout is not None:
        args += ["--timeout", str(float(timeout))]
    return args


def _command(cmd: Union[str, Sequence[str]]) -> list:
    if isinstance(cmd, str):
        return shlex.split(cmd)
    cmd = [str(c) for c in cmd]
    if not cmd:
        raise DittoError("the application command is empty: give the program and its arguments")
    return cmd


class Ditto:
    """Captures one kernel (`kernel`: bare name, name<templates>, full
    signature or mangled name, matched exactly as by `ditto run --kernel`;
    or `re:PATTERN`, a regular expression searched in the demangled
    signature, as `--kernel-regex`).
    `hsa_runtime`: None or "auto" (ROCr when /dev/kfd exists, else ditto's
    CPU runtime), "cpu" or "system"."""

    def __init__(self, kernel: str, hsa_runtime: Optional[str] = None) -> None:
        if not kernel:
            raise DittoError("kernel must name the kernel to capture")
        if hsa_runtime not in (None, "auto", "cpu", "system"):
            raise DittoError(f"hsa_runtime must be None, 'auto', 'cpu' or 'system', not {hsa_runtime!r}")
        self.kernel = kernel
        self.hsa_runtime = hsa_runtime

    def capture(
        self,
        cmd: Union[str, Sequence[str]],
        dispatch: str = "all",
        *,
        capture: Optional[str] = None,
        arg_types: Optional[str] = None,
        arg_sizes: Optional[str] = None,
        out: Optional[PathLike] = None,
        cwd: Optional[PathLike] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> Snapshot:
        """Runs `cmd` under ditto and returns what it captured. Without
        `out`, the snapshot lives in a temporary directory removed when the
        returned Snapshot is garbage-collected."""
        keep_alive = None
        if out is None:
            keep_alive = tempfile.TemporaryDirectory(prefix="ditto-")
            out = Path(keep_alive.name) / "snapshot"
        out = Path(out).absolute()
        args = ["run", "--kernel", self.kernel, "--out", str(out)]
        args += _capture_args(dispatch, capture, arg_types, arg_sizes, self.hsa_runtime, timeout)
        run([*args, "--", *_command(cmd)], cwd=cwd, env=env)
        snapshot = Snapshot.load(out)
        snapshot._keep_alive = keep_alive
        return snapshot


def _dir(s: SnapshotLike) -> str:
    return str(s.dir if isinstance(s, Snapshot) else Path(s))


def _result(stdout: str) -> Result:
    data = json.loads(stdout)
    return Result(data)


def compare(
    ref: SnapshotLike,
    opt: SnapshotLike,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
    equal_nan: bool = False,
    *,
    ulp: Optional[int] = None,
    opt_kernel: Optional[str] = None,
) -> Result:
    """Compares two snapshots (Snapshot objects or directories) as
    `ditto compare` does. A mismatch is a Result with valid False; a
    structural difference (other dtypes, lengths, dispatch counts) raises.
    `opt_kernel`: compare only the optimized snapshot's dispatches of that
    kernel (a renamed one)."""
    args = ["compare", _dir(ref), _dir(opt), "--json", *_tolerance_args(atol, rtol, ulp, equal_nan)]
    if opt_kernel is not None:
        args += ["--opt-kernel", opt_kernel]
    return _result(run(args, ok_codes=(0, 1)).stdout)


def validate(
    kernel: str,
    ref_cmd: Union[str, Sequence[str]],
    opt_cmd: Union[str, Sequence[str]],
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
    equal_nan: bool = False,
    *,
    ulp: Optional[int] = None,
    opt_kernel: Optional[str] = None,
    dispatch: Optional[str] = None,
    capture: Optional[str] = None,
    arg_types: Optional[str] = None,
    arg_sizes: Optional[str] = None,
    hsa_runtime: Optional[str] = None,
    ref_cwd: Optional[PathLike] = None,
    opt_cwd: Optional[PathLike] = None,
    keep: Optional[PathLike] = None,
    timeout: Optional[float] = None,
) -> Result:
    """Runs the reference and the optimized command under ditto and
    compares the kernel's buffers (`ditto validate`). `kernel` is matched
    exactly, or is a regular expression with the prefix `re:`;
    `opt_kernel` names the optimized build's kernel when it was renamed."""
    args = [
        "validate",
        "--kernel",
        kernel,
        "--ref",
        shlex.join(_command(ref_cmd)),
        "--opt",
        shlex.join(_command(opt_cmd)),
        "--json",
    ]
    args += _tolerance_args(atol, rtol, ulp, equal_nan)
    args += _capture_args(dispatch, capture, arg_types, arg_sizes, hsa_runtime, timeout)
    if ref_cwd is not None:
        args += ["--ref-cwd", str(ref_cwd)]
    if opt_cwd is not None:
        args += ["--opt-cwd", str(opt_cwd)]
    if keep is not None:
        args += ["--keep", str(keep)]
    if opt_kernel is not None:
        args += ["--opt-kernel", opt_kernel]
    return _result(run(args, ok_codes=(0, 1)).stdout)


def replay(
    snapshot: SnapshotLike,
    *,
    kernel_object: Optional[PathLike] = None,
    from_program: Optional[PathLike] = None,
    dispatch: Optional[str] = None,
    iterations: int = 1,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
    equal_nan: bool = False,
    ulp: Optional[int] = None,
    hsa_runtime: Optional[str] = None,
    relocate: bool = False,
    timeout: Optional[float] = None,
) -> Result:
    """Runs captured dispatches again on their own (`ditto replay`): the
    snapshot must come from a capture with `capture="replay"` (or
    "replay-all"). With `kernel_object` (a code object) or `from_program`
    (a program whose embedded device code holds the kernel of the same
    name) the replacement runs instead, after the captured kernel. The
    Result compares the replay's outputs with the application's; its
    `replay` dict holds the times (`times_ns`, `median_ns`), with a
    replacement `original_median_ns`, `speedup` and `original_reproduced`,
    and the ranges that had to be `relocated`."""
    args = ["replay", _dir(snapshot), "--json", "--iterations", str(int(iterations))]
    args += _tolerance_args(atol, rtol, ulp, equal_nan)
    for flag, value in (
        ("--kernel-object", kernel_object),
        ("--from", from_program),
        ("--dispatch", dispatch),
        ("--hsa-runtime", hsa_runtime),
    ):
        if value is not None:
            args += [flag, str(value)]
    if relocate:
        args.append("--relocate")
    if timeout is not None:
        args += ["--timeout", str(float(timeout))]
    return _result(run(args, ok_codes=(0, 1)).stdout)

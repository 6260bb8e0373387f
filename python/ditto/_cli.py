"""Finding and running the `ditto` command; turning its failures into exceptions.

Owns the only place this package starts processes. Everything else builds
argument lists and reads what the command wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Mapping, Optional, Sequence


class DittoError(Exception):
    """The `ditto` command failed (exit 2): `message` is its own error text."""

    def __init__(self, message: str, *, exit_code: int = 2, stderr: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.stderr = stderr


class KernelNotDispatched(DittoError):
    """The application never dispatched a kernel matching the name; the
    message lists the kernels it did dispatch."""


def ditto_binary() -> str:
    """The `ditto` executable: $DITTO_BIN, else `ditto` on PATH."""
    given = os.environ.get("DITTO_BIN")
    if given:
        if not os.access(given, os.X_OK):
            raise DittoError(
                f"DITTO_BIN={given} is not an executable file; point it at the `ditto` binary "
                "(e.g. target/release/ditto after `cargo build --release`)"
            )
        return given
    found = shutil.which("ditto")
    if found is None:
        raise DittoError(
            "the `ditto` command was not found: build it (`cargo build --release` in the ditto "
            "repository) and set DITTO_BIN to target/release/ditto, or put it on PATH"
        )
    return found


def error_text(stderr: str) -> str:
    """The `ditto: error: ...` part of the command's stderr (with the lines
    that continue it), else its last non-empty lines."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("ditto: error: "):
            rest = [line[len("ditto: error: ") :]]
            rest += [l for l in lines[i + 1 :] if not l.startswith("ditto: ")]
            return "\n".join(rest).strip()
    tail = [l for l in lines if l.strip()][-5:]
    return "\n".join(tail) if tail else "ditto failed without a message"


def run(
    args: Sequence[str],
    *,
    cwd: Optional[os.PathLike] = None,
    env: Optional[Mapping[str, str]] = None,
    ok_codes: Sequence[int] = (0,),
) -> subprocess.CompletedProcess:
    """Runs `ditto ARGS`; raises DittoError for an exit code not in `ok_codes`."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    done = subprocess.run(
        [ditto_binary(), *args],
        cwd=None if cwd is None else str(cwd),
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if done.returncode not in ok_codes:
        raise_for(done)
    return done


def raise_for(done: subprocess.CompletedProcess) -> None:
    message = error_text(done.stderr)
    # --json commands report their error in the JSON object too.
    try:
        data = json.loads(done.stdout) if done.stdout.strip() else None
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            message = data["error"]
    except json.JSONDecodeError:
        pass
    kind = KernelNotDispatched if "never dispatched" in message else DittoError
    raise kind(message, exit_code=done.returncode, stderr=done.stderr)


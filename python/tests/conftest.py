"""Fixtures: the repository's built `ditto` and test applications.

Build them first (`cargo build --workspace`); DITTO_TEST_PROFILE=release
picks target/release instead of target/debug, and CARGO_TARGET_DIR, when
set, is the target directory (as for cargo).
"""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TARGET_DIR = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
PROFILE_DIR = TARGET_DIR / os.environ.get("DITTO_TEST_PROFILE", "debug")


@pytest.fixture(scope="session", autouse=True)
def ditto_bin():
    binary = PROFILE_DIR / "ditto"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `cargo build --workspace` first")
    previous = os.environ.get("DITTO_BIN")
    os.environ["DITTO_BIN"] = str(binary)
    yield binary
    if previous is None:
        del os.environ["DITTO_BIN"]
    else:
        os.environ["DITTO_BIN"] = previous


@pytest.fixture(scope="session")
def apps():
    directory = PROFILE_DIR / "apps"
    if not (directory / "scale_values").exists():
        pytest.fail(f"{directory} has no test applications: run `cargo build --workspace` first")
    return directory

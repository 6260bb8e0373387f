"""The verdict of a comparison, as the `ditto compare --json` object says it."""

from __future__ import annotations

from typing import List, Optional


class Result:
    """Whether an optimized run computed what the reference computed.

    `valid` is True when every compared array is within tolerance.
    `mismatches` holds one dict per array that is not (rank, dispatch, arg,
    phase, dtype, mismatched_elements, total_elements, max_abs_diff and its
    index, max_rel_diff and its index, atol, rtol, worst elements, NaN and
    inf counts, and the argument's source `name` where the build kept it);
    `arrays` one per compared array; `timing` both sides' kernel times
    (medians, `speedup` = reference / optimized, per dispatch);
    `optimized_kernel` the optimized run's kernel when it differs; `data`
    is the whole JSON object (schema in the repository's README, "JSON
    output").
    """

    def __init__(self, data: dict) -> None:
        self.data = data
        self.valid: bool = bool(data.get("valid"))
        self.kernel: str = data.get("kernel", "")
        self.reference: str = data.get("reference", "")
        self.optimized: str = data.get("optimized", "")
        self.mismatches: List[dict] = list(data.get("mismatches", []))
        self.arrays: List[dict] = list(data.get("arrays", []))
        self.dispatches_compared: int = int(data.get("dispatches_compared", 0))
        self.optimized_kernel: Optional[str] = data.get("optimized_kernel")
        self.timing: dict = dict(data.get("timing") or {})

    @property
    def speedup(self) -> Optional[float]:
        """Reference median time / optimized median time (above 1: the
        optimized kernel is faster); None when the runtime gave no times."""
        return self.timing.get("speedup")

    def summary(self) -> str:
        """The report `ditto compare` prints: one PASS line, or FAIL with the
        mismatch table (shaped like torch.testing.assert_close's message)."""
        return self.data.get("summary", "")

    def __bool__(self) -> bool:
        return self.valid

    def __repr__(self) -> str:
        verdict = "valid" if self.valid else f"{len(self.mismatches)} mismatching array(s)"
        return f"Result({self.kernel!r}: {verdict}, {len(self.arrays)} array(s) compared)"

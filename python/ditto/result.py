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
    `optimized_kernel` the optimized run's kernel when it differs;
    `written` the arrays compared by what the kernels wrote (outputs
    inside a larger allocation, or `--capture written`), with
    `outside_comparison` and `written_by_one_side` over them; `data` is the
    whole JSON object (schema: the book's "JSON output", docs/src/json.md).
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
        # `ditto replay` only: the replay's times and notes.
        self.replay: dict = dict(data.get("replay") or {})

    @property
    def speedup(self) -> Optional[float]:
        """Reference median time / optimized median time (above 1: the
        optimized kernel is faster); None when the runtime gave no times."""
        return self.timing.get("speedup")

    @property
    def written(self) -> List[dict]:
        """The compared arrays whose comparison was limited to what either
        kernel wrote: each array dict, its `written` holding `compared`,
        `untouched` (outside the comparison), `only_reference` and
        `only_optimized` ({count, runs: [[first, last]], past_the_other})."""
        return [a for a in self.arrays if a.get("written")]

    @property
    def outside_comparison(self) -> int:
        """Elements that neither kernel wrote, over every array compared by
        what the kernels wrote: not compared (they are not the kernel's)."""
        return sum(int(a["written"].get("untouched", 0)) for a in self.written)

    def written_by_one_side(self, side: str = "optimized") -> List[dict]:
        """Where only one side's kernel wrote ("optimized" or "reference"):
        one dict per array with rank, dispatch, arg, name, count, runs of
        indices ([first, last]) and past_the_other (every such index lies
        past what the other kernel wrote: an out-of-bounds write, or a tail
        the other left out)."""
        if side not in ("optimized", "reference"):
            raise ValueError(f"side is 'optimized' or 'reference', not {side!r}")
        found = []
        for a in self.written:
            one = a["written"].get(f"only_{side}") or {}
            if one.get("count"):
                found.append({
                    "rank": a.get("rank"), "dispatch": a.get("dispatch"), "arg": a.get("arg"),
                    "name": a.get("name"), "count": one["count"], "runs": one.get("runs", []),
                    "past_the_other": bool(one.get("past_the_other")),
                })
        return found

    def summary(self) -> str:
        """The report `ditto compare` prints: one PASS line, or FAIL with the
        mismatch table (shaped like torch.testing.assert_close's message)."""
        return self.data.get("summary", "")

    def __bool__(self) -> bool:
        return self.valid

    def __repr__(self) -> str:
        verdict = "valid" if self.valid else f"{len(self.mismatches)} mismatching array(s)"
        return f"Result({self.kernel!r}: {verdict}, {len(self.arrays)} array(s) compared)"

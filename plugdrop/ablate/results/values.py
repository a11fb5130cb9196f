"""The values a study decides on: variant -> seed -> the decision metric of each run that ended
(:data:`Values`), from a whole folder (:func:`decision_values`) or run by run as runs end
(:func:`run_value`)."""

from __future__ import annotations

from collections.abc import Mapping

from .read import FAILED, FINISHED, Ablation, Run

__all__ = ["Values", "decision_values", "run_value"]

#: variant -> seed -> the decision metric of a finished run (``None``: the run failed, or
#: finished without a value of it); a run that has not ended is absent
Values = Mapping[str, Mapping[int, "float | None"]]


def run_value(run: Run, metric: str) -> tuple[bool, float | None]:
    """Whether ``run`` ended (finished or failed) and, if so, its value of ``metric`` (the last
    one it recorded; ``None`` for a failed run)."""
    if run.status == FINISHED:
        return True, run.final(metric)
    return run.status == FAILED, None


def decision_values(ab: Ablation, metric: str) -> dict[str, dict[int, float | None]]:
    """Variant -> seed -> the last epoch's ``metric`` of each finished run (``None`` for a
    failed run): what an adaptive design decides on."""
    out: dict[str, dict[int, float | None]] = {}
    for r in ab.runs:
        ended, value = run_value(r, metric)
        if ended:
            out.setdefault(r.variant, {})[r.seed] = value
    return out

"""The fixed design's decisions (a list of seeds): each variant's paired difference to the
baseline tested once, the p-values adjusted by Holm's step-down procedure over the variants, so
that the family-wise error of the better/worse verdicts stays at ``alpha``."""

from __future__ import annotations

from collections.abc import Sequence

from ..config import DecisionRule
from .stats import Paired

__all__ = ["NO_CLEAR", "fixed_verdict", "holm"]

#: the verdict of a variant whose difference is not significant
NO_CLEAR = "no clear difference"


def holm(p: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of p-values (``None`` stays ``None``): the family-wise
    error over the variants stays at the level the adjusted values are compared with."""
    known = sorted((x, i) for i, x in enumerate(p) if x is not None)
    out: list[float | None] = [None] * len(p)
    running = 0.0
    for rank, (x, i) in enumerate(known):
        running = max(running, min(1.0, x * (len(known) - rank)))
        out[i] = running
    return out


def fixed_verdict(diff: Paired, p_adjusted: float | None, rule: DecisionRule) -> str:
    """A variant's verdict in a fixed design: ``better`` / ``worse`` when Holm's adjusted p
    lies below ``alpha`` (by the sign of the difference in the metric's direction), ``too few
    seeds`` or ``no common seeds`` when it cannot be tested, else ``no clear difference``."""
    if diff.verdict in ("too few seeds", "no common seeds"):
        return diff.verdict
    if p_adjusted is not None and p_adjusted < rule.alpha and diff.mean:
        return "better" if (diff.mean > 0) == rule.higher_is_better else "worse"
    return NO_CLEAR

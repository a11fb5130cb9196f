"""How many seeds an effect needs, from what an ablation folder has seen (``plugdrop plan --from
OUT --effect X``): the spread of its paired differences (:func:`spread_of`), the count of a fixed
design (:func:`~.simulate.seeds_needed`) and the smallest maximum of an adaptive design with the
folder's spending that reaches the same power, by simulation (:func:`adaptive_seeds`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import Spending
from ..results import Ablation, decision_values
from .simulate import plan

__all__ = ["Spread", "adaptive_seeds", "spread_of"]


@dataclass(frozen=True)
class Spread:
    """The spread of an ablation's paired differences (each variant's decision metric minus the
    baseline's, per seed both finished), in display units.

    Attributes:
        sd: the standard deviation, pooled over the variants (each about its own mean).
        pairs: the differences it comes from.
        variants: the variants compared with the baseline (those with 2 pairs or more give
            the spread).
        metric: the decision metric's name; unit: its display unit (``pp``, ``nats``).
    """

    sd: float
    pairs: int
    variants: int
    metric: str
    unit: str


def spread_of(ab: Ablation) -> Spread | None:
    """The pooled spread of the paired differences of ``ab`` (``None``: no variant has two
    seeds finished together with the baseline, or they do not vary)."""
    rule = ab.config.decision
    values = decision_values(ab, rule.metric.name)
    base = values.get(ab.baseline or "", {})
    sign = 1.0 if rule.higher_is_better else -1.0
    others = [v for v in ab.variants if v != ab.baseline]
    ss, df, pairs = 0.0, 0, 0
    for v in others:
        mine = values.get(v, {})
        d = np.array([sign * rule.metric.scale * (x - b) for s, x in mine.items()
                      if x is not None and (b := base.get(s)) is not None], dtype=np.float64)
        d = d[np.isfinite(d)]
        if len(d) >= 2:
            ss += float(((d - d.mean()) ** 2).sum())
            df += len(d) - 1
            pairs += len(d)
    if ab.baseline is None or df == 0 or not ss > 0:
        return None
    return Spread(math.sqrt(ss / df), pairs, len(others), rule.metric.name, rule.metric.unit)


def adaptive_seeds(effect: float, variants: int, smallest: int, step: int, alpha: float,
                   spending: Spending, passing: bool, power: float = 0.8, reps: int = 4000,
                   start: int = 2, limit: int = 40) -> tuple[int, float, float] | None:
    """The smallest maximum of an adaptive design (seeds ``smallest..max`` in rounds of
    ``step``) under which one variant with a true ``effect`` (sd of the paired difference),
    among ``variants`` of which the others have none, is called the right way with
    probability ``power``: ``(max, its power, its mean seeds)``, by ``reps`` simulated
    ablations each (bisection from ``start``); ``None`` beyond ``limit`` seeds."""
    def power_at(top: int) -> tuple[float, float]:
        oc = plan((effect,) + (0.0,) * (variants - 1), (min(smallest, top), top), step,
                  alpha, reps=reps, spending=spending, passing=passing, seed=top)
        v = oc.variants[0]
        return (v.better if effect > 0 else v.worse), v.mean_seeds

    lo, hi = max(start, smallest, 2) - 1, max(start, smallest, 2)
    got = power_at(hi)
    while got[0] < power:  # double until reached
        if hi >= limit:
            return None
        lo, hi = hi, min(2 * hi, limit)
        got = power_at(hi)
    best = (hi, *got)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        at = power_at(mid)
        if at[0] >= power:
            hi, best = mid, (mid, *at)
        else:
            lo = mid
    return best

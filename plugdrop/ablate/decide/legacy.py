"""The adaptive design of plugdrop before the exact group-sequential one (issue 34), kept for
the folders it started: their decisions replay as they were made, also after ``--resume``
(a folder whose ``ablation.json`` records a config without ``spending``:
:func:`~plugdrop.ablate.config.legacy_design`).

After each round (a *look*), each open variant's per-seed difference to the baseline gets a
t-interval at level ``1 - a_k``, where the family's ``alpha`` is split evenly across the ``m``
variants (Bonferroni) and, within a variant, spent across the planned looks by a Pocock-type
spending function (Lan and DeMets, 1983): ``a_k = alpha / m * (g(t_k) - g(t_{k-1}))`` with
``g(t) = ln(1 + (e - 1) t)`` and ``t_k`` the share of the maximum seeds used. The running
intersection of a variant's intervals is a confidence sequence: by the union bound it covers the
true difference at every look at once with probability at least ``1 - alpha / m``, so over all
variants the family-wise error is at most ``alpha`` (conservatively: about 3% where 5% is
allowed, and less power than the exact design).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from ..config import DecisionRule, SeedPlan
from . import _scipy as sp
from .decision import (BETTER, DROPPED, EQUIVALENT, INCONCLUSIVE, OPEN, WORSE, Decision,
                       Replay)

__all__ = ["PROCEDURE", "replay", "spending", "weights"]

#: what the table calls this design
PROCEDURE = ("legacy (an ablation started before plugdrop's exact group-sequential design): "
             "Bonferroni over the variants, Pocock-type spending, union-bound intervals")


@functools.lru_cache(maxsize=4096)
def _t_quantile(q: float, df: int) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (scipy.special)."""
    return float(sp.special.stdtrit(df, q))


def spending(t: float) -> float:
    """The share of a variant's alpha spent by information fraction ``t`` (Pocock-type:
    ``ln(1 + (e - 1) t)``, 0 at 0 and 1 at 1; spends early enough to stop early)."""
    return math.log1p((math.e - 1.0) * min(max(t, 0.0), 1.0))


def weights(plan: SeedPlan) -> list[float]:
    """The share of a variant's alpha spent at each look of ``plan`` (they sum to 1)."""
    ts = [n / plan.max for n in plan.looks()]
    return [spending(t) - spending(prev) for prev, t in zip([0.0] + ts[:-1], ts)]


def replay(plan: SeedPlan, baseline: str, variants: Sequence[str], rule: DecisionRule,
           values: Mapping[str, Mapping[int, float | None]]) -> Replay:
    """Replay the legacy design over ``values``: variant -> seed -> the decision metric of a
    finished run (``None`` for a failed run; a run not ended is absent)."""
    state = {v: Decision(v, higher_is_better=rule.higher_is_better) for v in variants}
    out = Replay(state, procedure=PROCEDURE)
    seeds = plan.seeds()
    lows = {v: -math.inf for v in variants}
    highs = {v: math.inf for v in variants}
    for k, n_k in enumerate(plan.looks()):
        open_ = [v for v in variants if state[v].verdict == OPEN]
        if not open_:
            break
        out.rounds.append(n_k)
        use = seeds[:n_k]
        out.needed = [(v, s) for v in [baseline, *open_] for s in use
                      if s not in values.get(v, {})]
        if out.needed:
            return out
        last = n_k == plan.max
        for v in open_:
            state[v] = _look(plan, baseline, len(variants), rule, k, v, use, values, lows,
                             highs, state[v], last)
        _race(k, state, open_)
        for v in open_:
            if state[v].verdict != OPEN:
                out.events.append({"round": k + 1, "seeds": n_k, **state[v].as_dict()})
    out.needed = []
    out.complete = True
    return out


def _look(plan: SeedPlan, baseline: str, m: int, rule: DecisionRule, k: int, v: str,
          use: Sequence[int], values: Mapping[str, Mapping[int, float | None]],
          lows: dict[str, float], highs: dict[str, float], prev: Decision, last: bool
          ) -> Decision:
    base, mine = values.get(baseline, {}), values.get(v, {})
    sign = 1.0 if rule.higher_is_better else -1.0
    d = np.array([sign * rule.metric.scale * (mine[s] - base[s])  # type: ignore[operator]
                  for s in use
                  if mine.get(s) is not None and base.get(s) is not None], dtype=np.float64)
    n = len(d)
    if n < 2:
        verdict = INCONCLUSIVE if last else OPEN
        return replace(prev, verdict=verdict, n=n, round=k + 1 if last else 0,
                       reason=f"{n} seed(s) finished in both: nothing to compare")
    mean = float(d.mean())
    m = max(m, 1)
    a_k = rule.alpha / m * weights(plan)[k]
    sd = float(d.std(ddof=1))
    if sd <= 1e-12 * max(1.0, abs(mean)):
        low_k = high_k = mean
        p_k = 1.0 if abs(mean) <= 1e-12 else 0.0
    else:
        h = _t_quantile(1.0 - a_k / 2.0, n - 1) * sd / math.sqrt(n)
        low_k, high_k = mean - h, mean + h
        p_k = float(2.0 * sp.special.stdtr(n - 1, -abs(mean) / (sd / math.sqrt(n))))
    low, high = max(lows[v], low_k), min(highs[v], high_k)
    if low > high:  # the intervals disagree (a coverage miss): keep the latest
        low, high = low_k, high_k
    lows[v], highs[v] = low, high
    w = weights(plan)[k]
    p_adj = min(1.0, p_k * m / w, prev.p if prev.p is not None else 1.0)
    level = f"{100 * (1 - rule.alpha):g}% family-wise"
    # The reasons speak of the interval as shown: the metric minus the baseline's.
    up, down = ("above", "below") if rule.higher_is_better else ("below", "above")
    verdict, reason = OPEN, ""
    if low > 0:
        verdict, reason = BETTER, f"its interval lies {up} 0 ({level})"
    elif high < 0:
        verdict, reason = WORSE, f"its interval lies {down} 0 ({level})"
    elif -rule.margin < low and high < rule.margin:
        verdict, reason = EQUIVALENT, (f"its interval lies within +-{rule.margin:g} "
                                       f"({level})")
    elif last:
        verdict, reason = INCONCLUSIVE, f"its interval still holds 0 at {n} seeds, the maximum"
    return Decision(v, verdict, n, mean, low, high, p_adj, k + 1 if verdict != OPEN else 0,
                    reason or "still open", higher_is_better=rule.higher_is_better)


def _race(k: int, state: dict[str, Decision], open_: list[str]) -> None:
    """Drop the open variants of a grid whose interval lies entirely below the best
    one's of that grid."""
    for v in open_:
        d = state[v]
        rivals = [r for r in state.values() if r.variant != v and r.low is not None
                  and r.low > -math.inf and _grid(r.variant) == _grid(v) and "[" in v]
        if not rivals or d.verdict != OPEN or d.high is None:
            continue
        best = max(rivals, key=lambda r: r.low)  # type: ignore[arg-type, return-value]
        if best.low is not None and d.high < best.low:
            state[v] = replace(d, verdict=DROPPED, round=k + 1, behind=best.variant,
                               reason=f"dropped: behind {best.variant} (its interval lies "
                                      f"below {best.variant}'s)")


def _grid(variant: str) -> str:
    """The grid a variant comes from: its name before ``[``."""
    return variant.split("[", 1)[0]

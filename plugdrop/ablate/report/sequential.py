"""The adaptive seed design: seeds run in rounds, and a variant stops receiving seeds once its
difference to the baseline is decided.

After each round (a *look*), each open variant's per-seed difference to the baseline (the same
seeds, oriented so that positive means better) gets a t-interval at level ``1 - a_k``, where the
family's ``alpha`` is split evenly across the ``m`` variants (Bonferroni) and, within a variant,
spent across the planned looks by a Pocock-type spending function (Lan and DeMets, 1983):
``a_k = alpha / m * (g(t_k) - g(t_{k-1}))`` with ``g(t) = ln(1 + (e - 1) t)`` and ``t_k`` the
share of the maximum seeds used. The running intersection of a variant's intervals is a
confidence sequence: by the union bound it covers the true difference at every look at once
with probability at least ``1 - alpha / m``, however the looks depend on each other, so looking
after every round does not raise the error rate, and over all variants the family-wise error
is at most ``alpha``.

A variant is **better** when its interval lies above 0, **worse** below 0 (for a metric where
lower is better, such as ``val_nll``, the interval shown is of the metric minus the baseline's,
so better lies below 0 there), **equivalent** when
it lies within ``(-margin, margin)`` (two one-sided tests); among the variants of one grid
(``dropblock[p=0.05]``, ``dropblock[p=0.1]``: the values of one regularizer race), one whose
interval lies entirely below the best one's is **dropped**; at the maximum number of seeds an
open variant is **inconclusive**. The baseline runs as long as any
variant is open. Everything here is a pure function of the finished runs' values, so a resumed
ablation replays the same decisions with the same seeds.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy import special

from ..config import AblationConfig, DecisionRule, SeedPlan

__all__ = ["BETTER", "DROPPED", "EQUIVALENT", "INCONCLUSIVE", "OPEN", "WORSE", "Decision",
           "Design", "Replay", "design_of", "spending", "weights"]

OPEN, BETTER, WORSE = "open", "better", "worse"
EQUIVALENT, INCONCLUSIVE, DROPPED = "equivalent", "inconclusive", "dropped"


@functools.lru_cache(maxsize=4096)
def _t_quantile(q: float, df: int) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (scipy.special)."""
    return float(special.stdtrit(df, q))


def spending(t: float) -> float:
    """The share of a variant's alpha spent by information fraction ``t`` (Pocock-type:
    ``ln(1 + (e - 1) t)``, 0 at 0 and 1 at 1; spends early enough to stop early)."""
    return math.log1p((math.e - 1.0) * min(max(t, 0.0), 1.0))


def weights(plan: SeedPlan) -> list[float]:
    """The share of a variant's alpha spent at each look of ``plan`` (they sum to 1)."""
    ts = [n / plan.max for n in plan.looks()]
    return [spending(t) - spending(prev) for prev, t in zip([0.0] + ts[:-1], ts)]


@dataclass(frozen=True)
class Decision:
    """Where a variant stands after a look.

    Attributes:
        variant: its name.
        verdict: :data:`OPEN`, :data:`BETTER`, :data:`WORSE`, :data:`EQUIVALENT`,
            :data:`INCONCLUSIVE` or :data:`DROPPED`.
        n: the seeds compared (finished for it and for the baseline).
        mean: mean per-seed difference to the baseline, oriented so that positive is better
            (for a loss: the baseline's minus this variant's), display units.
        low, high: the confidence sequence (the intersection of its intervals so far), oriented
            as ``mean``; :meth:`shown` gives all three as the metric minus the baseline's.
        p: the adjusted p-value: the smallest family-wise level at which a look so far would
            have called it better or worse (``min(1, min_k p_k * m / w_k)``).
        round: the round (1-based) of the look that decided it; 0 while open.
        reason: one sentence saying why.
        behind: for a dropped variant, the variant it lies behind.
        higher_is_better: the decision metric's direction (how :meth:`shown` turns the
            oriented numbers back).
    """

    variant: str
    verdict: str = OPEN
    n: int = 0
    mean: float | None = None
    low: float | None = None
    high: float | None = None
    p: float | None = None
    round: int = 0
    reason: str = "not looked at yet"
    behind: str | None = None
    higher_is_better: bool = True

    def shown(self) -> tuple[float | None, float | None, float | None]:
        """``(mean, low, high)`` of the decision metric minus the baseline's, as the table,
        ``decisions.jsonl`` and ``results.json`` show them (a worse loss: above 0)."""
        if self.higher_is_better:
            return self.mean, self.low, self.high
        neg = lambda x: None if x is None else -x  # noqa: E731
        return neg(self.mean), neg(self.high), neg(self.low)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able fields; ``mean``, ``low``, ``high`` as :meth:`shown`."""
        mean, low, high = self.shown()
        return {"variant": self.variant, "verdict": self.verdict, "n": self.n,
                "mean": mean, "low": low, "high": high, "p_adjusted": self.p,
                "round": self.round, "reason": self.reason, "behind": self.behind}


@dataclass
class Replay:
    """What a design's replay over the finished runs says.

    Attributes:
        decisions: variant -> its latest :class:`Decision`.
        events: one dict per decision taken, in order (``OUT/decisions.jsonl``).
        needed: the runs ``(variant, seed)`` the next round needs that have not ended.
        rounds: the rounds started, with the seeds each uses.
        complete: every variant decided (or at its maximum): nothing more to train.
    """

    decisions: dict[str, Decision]
    events: list[dict[str, Any]] = field(default_factory=list)
    needed: list[tuple[str, int]] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    complete: bool = False

    def seeds_used(self, variant: str) -> int:
        """How many seeds the design gave ``variant`` (or the baseline) so far."""
        d = self.decisions.get(variant)
        if d is not None and d.verdict != OPEN and d.round:
            return self.rounds[d.round - 1]
        return self.rounds[-1] if self.rounds else 0


@dataclass(frozen=True)
class Design:
    """An adaptive comparison of ``variants`` with ``baseline``.

    Args:
        plan: the seeds and rounds.
        baseline: the reference variant.
        variants: the others, in config order.
        rule: the decision metric (its direction and display units), the family-wise error
            rate over every variant and look, and the equivalence margin (display units:
            percentage points for accuracies).

    The variants of one grid are those whose names share the part before ``[``.
    """

    plan: SeedPlan
    baseline: str
    variants: tuple[str, ...]
    rule: DecisionRule

    @property
    def alpha(self) -> float:
        return self.rule.alpha

    @property
    def margin(self) -> float:
        return self.rule.margin

    @property
    def higher_is_better(self) -> bool:
        return self.rule.higher_is_better

    @property
    def scale(self) -> float:
        return self.rule.metric.scale

    def level(self, look: int) -> float:
        """The two-sided error level of one variant's interval at look ``look`` (0-based)."""
        return self.alpha / max(len(self.variants), 1) * weights(self.plan)[look]

    def replay(self, values: Mapping[str, Mapping[int, float | None]]) -> Replay:
        """Replay the design over ``values``: variant -> seed -> the decision metric of a
        finished run (``None`` for a failed run; a run not ended is absent)."""
        state = {v: Decision(v, higher_is_better=self.higher_is_better) for v in self.variants}
        out = Replay(state)
        seeds = self.plan.seeds()
        lows = {v: -math.inf for v in self.variants}
        highs = {v: math.inf for v in self.variants}
        for k, n_k in enumerate(self.plan.looks()):
            open_ = [v for v in self.variants if state[v].verdict == OPEN]
            if not open_:
                break
            out.rounds.append(n_k)
            use = seeds[:n_k]
            out.needed = [(v, s) for v in [self.baseline, *open_] for s in use
                          if s not in values.get(v, {})]
            if out.needed:
                return out
            last = n_k == self.plan.max
            for v in open_:
                state[v] = self._look(k, v, use, values, lows, highs, state[v], last)
            self._race(k, state, open_)
            for v in open_:
                if state[v].verdict != OPEN:
                    out.events.append({"round": k + 1, "seeds": n_k, **state[v].as_dict()})
        out.needed = []
        out.complete = True
        return out

    def _look(self, k: int, v: str, use: Sequence[int],
              values: Mapping[str, Mapping[int, float | None]], lows: dict[str, float],
              highs: dict[str, float], prev: Decision, last: bool) -> Decision:
        base, mine = values.get(self.baseline, {}), values.get(v, {})
        sign = 1.0 if self.higher_is_better else -1.0
        d = np.array([sign * self.scale * (mine[s] - base[s]) for s in use  # type: ignore[operator]
                      if mine.get(s) is not None and base.get(s) is not None], dtype=np.float64)
        n = len(d)
        if n < 2:
            verdict = INCONCLUSIVE if last else OPEN
            return replace(prev, verdict=verdict, n=n, round=k + 1 if last else 0,
                           reason=f"{n} seed(s) finished in both: nothing to compare")
        mean = float(d.mean())
        a_k = self.level(k)
        sd = float(d.std(ddof=1))
        if sd <= 1e-12 * max(1.0, abs(mean)):
            low_k = high_k = mean
            p_k = 1.0 if abs(mean) <= 1e-12 else 0.0
        else:
            h = _t_quantile(1.0 - a_k / 2.0, n - 1) * sd / math.sqrt(n)
            low_k, high_k = mean - h, mean + h
            p_k = float(2.0 * special.stdtr(n - 1, -abs(mean) / (sd / math.sqrt(n))))
        low, high = max(lows[v], low_k), min(highs[v], high_k)
        if low > high:  # the intervals disagree (a coverage miss): keep the latest
            low, high = low_k, high_k
        lows[v], highs[v] = low, high
        m, w = max(len(self.variants), 1), weights(self.plan)[k]
        p_adj = min(1.0, p_k * m / w, prev.p if prev.p is not None else 1.0)
        level = f"{100 * (1 - self.alpha):g}% family-wise"
        # The reasons speak of the interval as shown: the metric minus the baseline's.
        up, down = ("above", "below") if self.higher_is_better else ("below", "above")
        verdict, reason = OPEN, ""
        if low > 0:
            verdict, reason = BETTER, f"its interval lies {up} 0 ({level})"
        elif high < 0:
            verdict, reason = WORSE, f"its interval lies {down} 0 ({level})"
        elif -self.margin < low and high < self.margin:
            verdict, reason = EQUIVALENT, (f"its interval lies within +-{self.margin:g} "
                                           f"({level})")
        elif last:
            verdict, reason = INCONCLUSIVE, f"its interval still holds 0 at {n} seeds, the maximum"
        return Decision(v, verdict, n, mean, low, high, p_adj,
                        k + 1 if verdict != OPEN else 0, reason or "still open",
                        higher_is_better=self.higher_is_better)

    def _race(self, k: int, state: dict[str, Decision], open_: list[str]) -> None:
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


def design_of(cfg: AblationConfig) -> Design | None:
    """The adaptive design of a config, or ``None`` for a fixed one (a list of seeds) or
    without a baseline."""
    if cfg.plan is None or cfg.baseline is None:
        return None
    return Design(cfg.plan, cfg.baseline,
                  tuple(v for v in cfg.variant_names if v != cfg.baseline), cfg.decision)

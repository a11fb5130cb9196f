"""Where the variants of an adaptive design stand: one :class:`Decision` per variant and the
:class:`Replay` of the design over the finished runs (the seeds of the next round, the rounds,
the decisions in order), and what a variant's differences add to its decision
(:func:`annotated`: skewness, forecast, procedure). The design's statistics that fill them are
in :mod:`.sequential` (the exact group-sequential design) and :mod:`.legacy` (the design of
folders started before it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .simulate import seeds_needed
from .skew import skew_warning, skewness

__all__ = ["BETTER", "DROPPED", "EQUIVALENT", "FORECAST_POWER", "INCONCLUSIVE", "OPEN", "WORSE",
           "Decision", "Replay", "annotated", "grid_of"]

OPEN, BETTER, WORSE = "open", "better", "worse"
EQUIVALENT, INCONCLUSIVE, DROPPED = "equivalent", "inconclusive", "dropped"
#: the power the forecast of an undecided variant asks for
FORECAST_POWER = 0.8
_SAME = 1e-12  # relative spread under which differences count as identical


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
        low, high: its interval, oriented as ``mean`` (the exact design: at its level and look,
            so that it lies above 0 exactly when it is called better; for an equivalent
            variant the interval of the two one-sided tests; the legacy design: the
            confidence sequence, the intersection of its intervals so far); :meth:`shown`
            gives all three as the metric minus the baseline's.
        p: the adjusted p-value: the smallest family-wise level at which the design would
            have called it better or worse.
        round: the round (1-based) of the look that decided it; 0 while open.
        reason: one sentence saying why.
        behind: for a dropped variant, the variant it lies behind.
        higher_is_better: the decision metric's direction (how :meth:`shown` turns the
            oriented numbers back).
        skewness: the sample skewness of its differences (``None`` below 3), and
        skew_warning: whether it is large enough to doubt the t-boundaries.
        forecast: for a variant left inconclusive or open, about how many seeds a true effect
            of the size observed needs to be called better or worse (a fixed design's count
            at its level, 80% power); ``None``: no forecast (decided, fewer than 2 seeds, no
            effect seen, or more than 10,000 seeds).
        procedure: the procedure that decided (:attr:`Replay.procedure`).
        pooled_skewness, pooled_skew_warning: the skewness of all variants' differences
            together (each standardised), the same for every variant, and its warning.
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
    skewness: float | None = None
    skew_warning: bool = False
    forecast: int | None = None
    procedure: str = ""
    pooled_skewness: float | None = None
    pooled_skew_warning: bool = False

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
                "round": self.round, "reason": self.reason, "behind": self.behind,
                "skewness": self.skewness, "skew_warning": self.skew_warning,
                "forecast_seeds": self.forecast, "procedure": self.procedure,
                "pooled_skewness": self.pooled_skewness,
                "pooled_skew_warning": self.pooled_skew_warning}


@dataclass
class Replay:
    """What a design's replay over the finished runs says.

    Attributes:
        decisions: variant -> its latest :class:`Decision`.
        events: one dict per decision taken, in order (``OUT/decisions.jsonl``).
        needed: the runs ``(variant, seed)`` the next round needs that have not ended.
        rounds: the rounds started, with the seeds each uses.
        complete: every variant decided (or at its maximum): nothing more to train.
        procedure: the procedure that decided, in words.
    """

    decisions: dict[str, Decision]
    events: list[dict[str, Any]] = field(default_factory=list)
    needed: list[tuple[str, int]] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    complete: bool = False
    procedure: str = ""

    def seeds_used(self, variant: str) -> int:
        """How many seeds the design gave ``variant`` (or the baseline) so far."""
        d = self.decisions.get(variant)
        if d is not None and d.verdict != OPEN and d.round:
            return self.rounds[d.round - 1]
        return self.rounds[-1] if self.rounds else 0


def grid_of(variant: str) -> str | None:
    """The grid a variant comes from (its name before ``[``), ``None`` for one of no grid."""
    return variant.split("[", 1)[0] if "[" in variant else None


def annotated(d: Decision, diffs: np.ndarray, level: float, procedure: str,
              pooled: tuple[float, bool]) -> Decision:
    """``d`` with the fields its differences give (``diffs``: its paired differences, display
    units, ``nan`` for a missing pair, over the seeds it used): the skewness and its warning,
    the forecast of a variant left inconclusive or open (at ``level``, its share of alpha),
    the ``procedure`` and the ``pooled`` skewness of the ablation with its warning."""
    x = diffs[~np.isnan(diffs)]
    sk = skewness(x)
    forecast = None
    if d.verdict in (INCONCLUSIVE, OPEN) and len(x) >= 2 and 0.0 < level < 1.0:
        sd = float(np.std(x, ddof=1))
        if sd > _SAME * max(1.0, float(np.max(np.abs(x)))) and abs(float(np.mean(x))) > 0:
            forecast = seeds_needed(float(np.mean(x)) / sd, level, FORECAST_POWER)
    return replace(d, skewness=None if math.isnan(sk) else sk,
                   skew_warning=skew_warning(sk, len(x)), forecast=forecast,
                   procedure=procedure,
                   pooled_skewness=None if math.isnan(pooled[0]) else pooled[0],
                   pooled_skew_warning=pooled[1])

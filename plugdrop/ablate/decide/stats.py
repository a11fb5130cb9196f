"""Confidence intervals over seeds and paired comparisons to the baseline (scipy.stats).

An ablation trains every variant with the same seeds, so the honest comparison is paired: the
difference of a metric between a variant and the baseline is taken seed by seed, and the mean of
those differences gets a t-interval and a paired t-test (:func:`scipy.stats.ttest_rel`). With
fewer than :data:`MIN_SEEDS` common seeds the numbers are still given, but marked as too few to
conclude anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from . import _scipy as sp

__all__ = ["MIN_SEEDS", "Interval", "Paired", "mean_ci", "p_cell", "paired_difference"]

#: The fewest paired seeds from which a difference is called better or worse.
MIN_SEEDS = 3

# Relative tolerance under which values count as identical (float rounding, not data).
_SAME = 1e-12


def _no_spread(values: np.ndarray) -> bool:
    """Whether all ``values`` are equal up to float rounding (``0.9 - 0.8 != 0.92 - 0.82``)."""
    return float(np.ptp(values)) <= _SAME * max(1.0, float(np.max(np.abs(values))))


def _t_half_width(values: np.ndarray, confidence: float) -> float:
    """Half width of the t-interval of the mean of ``values`` (at least two of them)."""
    n = len(values)
    if _no_spread(values):
        return 0.0
    sd = float(np.std(values, ddof=1))
    q = float(sp.stats.t.ppf(0.5 + confidence / 2, n - 1))
    return q * sd / math.sqrt(n)


def _cell(mean: float, low: float | None, high: float | None, n: int, scale: float,
          digits: int, sign: str) -> str:
    """``"m [low, high]"``, ``"m (1 seed, no CI)"`` or ``"-"``; ``sign="+"`` signs numbers."""
    if n == 0:
        return "-"
    fmt = f"{sign}.{digits}f"

    def num(v: float) -> str:
        return format(round(v * scale, digits) or 0.0, fmt)  # no "-0.00"

    if low is None or high is None:
        return f"{num(mean)} (1 seed, no CI)"
    return f"{num(mean)} [{num(low)}, {num(high)}]"


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence!r}")


@dataclass(frozen=True)
class Interval:
    """The mean of a metric over seeds with its confidence interval.

    Attributes:
        mean: the mean over the ``n`` values (NaN when there are none).
        low, high: the interval's bounds, ``None`` when ``n < 2`` (no spread to measure).
        n: how many values (seeds).
        confidence: the interval's confidence level, e.g. 0.95.
        note: a plain sentence when there is no interval, else ``""``.
    """

    mean: float
    low: float | None
    high: float | None
    n: int
    confidence: float = 0.95
    note: str = ""

    @property
    def half_width(self) -> float | None:
        """Half the interval's width (the ``±`` value), ``None`` without an interval."""
        if self.low is None or self.high is None:
            return None
        return (self.high - self.low) / 2

    def format(self, scale: float = 100.0, digits: int = 2) -> str:
        """A table cell: ``"91.20 [90.10, 92.30]"``, ``"91.20 (1 seed, no CI)"`` or ``"-"``.

        Args:
            scale: factor applied to every number (100 turns a fraction into percent).
            digits: digits after the decimal point.
        """
        return _cell(self.mean, self.low, self.high, self.n, scale, digits, "")

    def as_dict(self) -> dict[str, object]:
        """Plain JSON-able fields."""
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n,
                "confidence": self.confidence, "note": self.note}


@dataclass(frozen=True)
class Paired:
    """The difference ``a - b`` of a metric, paired by seed, with its interval and p-value.

    Attributes:
        mean: mean of the per-seed differences (NaN without common seeds).
        low, high: confidence interval of that mean, ``None`` when ``n < 2``.
        p: two-sided p-value of the paired t-test, ``None`` when ``n < 2``.
        n: number of common seeds.
        seeds: the common seeds, sorted.
        confidence: the interval's confidence level.
        conclusive: whether there are enough seeds (``n >= MIN_SEEDS``) to call a difference.
        note: a plain sentence when not conclusive (``"too few seeds to conclude (n=2 < 3)"``).
        higher_is_better: the metric's direction (``False`` for a loss): which sign of
            :attr:`mean` :attr:`verdict` calls better.
    """

    mean: float
    low: float | None
    high: float | None
    p: float | None
    n: int
    seeds: tuple[int, ...]
    confidence: float = 0.95
    conclusive: bool = False
    note: str = ""
    higher_is_better: bool = True

    @property
    def verdict(self) -> str:
        """``"better"`` / ``"worse"`` (``a`` than ``b``, significant at ``1 - confidence``,
        in the metric's direction), ``"no clear difference"``, ``"too few seeds"`` or
        ``"no common seeds"``."""
        if self.n == 0:
            return "no common seeds"
        if not self.conclusive or self.p is None:
            return "too few seeds"
        if self.p < 1.0 - self.confidence and self.mean != 0.0:
            return "better" if (self.mean > 0) == self.higher_is_better else "worse"
        return "no clear difference"

    def format(self, scale: float = 100.0, digits: int = 2) -> str:
        """A table cell: ``"+0.90 [-0.20, +2.00]"``, ``"+0.90 (1 seed, no CI)"`` or ``"-"``.

        Args:
            scale: factor applied to every number (100: fractions to percentage points).
            digits: digits after the decimal point.
        """
        return _cell(self.mean, self.low, self.high, self.n, scale, digits, "+")

    def format_p(self) -> str:
        """The p-value as a table cell: ``"0.031"``, ``"<0.001"`` or ``"-"``."""
        return p_cell(self.p)

    def as_dict(self) -> dict[str, object]:
        """Plain JSON-able fields, the verdict included."""
        return {"mean": self.mean, "low": self.low, "high": self.high, "p": self.p,
                "n": self.n, "seeds": list(self.seeds), "confidence": self.confidence,
                "conclusive": self.conclusive, "note": self.note, "verdict": self.verdict}


def mean_ci(values: Sequence[float], confidence: float = 0.95,
            bounds: tuple[float, float] | None = None) -> Interval:
    """Mean of ``values`` with a t-distribution confidence interval.

    The interval is ``mean ± t_{(1+confidence)/2, n-1} · s / sqrt(n)`` with ``s`` the sample
    standard deviation. One value has no interval; none has a NaN mean.

    Args:
        values: one metric per seed.
        confidence: the interval's confidence level (default 0.95).
        bounds: the metric's range, e.g. ``(0, 1)`` for an accuracy: the interval is cut to
            it (the mean cannot lie outside, so the cut interval keeps its coverage).

    Example::

        >>> mean_ci([0.90, 0.92, 0.94]).format()
        '92.00 [87.03, 96.97]'
    """
    _check_confidence(confidence)
    x = np.asarray(list(values), dtype=np.float64)
    n = len(x)
    if n == 0:
        return Interval(math.nan, None, None, 0, confidence, "no finished runs")
    mean = float(np.mean(x))
    if n == 1:
        return Interval(mean, None, None, 1, confidence, "one seed: no confidence interval")
    h = _t_half_width(x, confidence)
    low, high = mean - h, mean + h
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return Interval(mean, low, high, n, confidence)


def p_cell(p: float | None) -> str:
    """A p-value as a table cell: ``"0.031"``, ``"<0.001"`` or ``"-"`` for ``None``."""
    if p is None:
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def paired_difference(a: Mapping[int, float], b: Mapping[int, float],
                      confidence: float = 0.95, higher_is_better: bool = True) -> Paired:
    """The difference ``a - b`` paired by seed, over the seeds both have.

    The mean of the per-seed differences gets a t-interval and the two-sided p-value of the
    paired t-test (:func:`scipy.stats.ttest_rel`). When every difference is the same (no spread,
    e.g. two variants that train identically) the test is degenerate: the p-value is 1 when
    that difference is 0 and 0 otherwise (every seed moved by the same amount), with no NaN and
    no warning; equality allows for float rounding. Fewer than
    :data:`MIN_SEEDS` common seeds give ``conclusive=False`` and a note saying so.

    Args:
        a: seed -> metric of the variant.
        b: seed -> metric of the reference (the baseline).
        confidence: the interval's confidence level (default 0.95).
        higher_is_better: the metric's direction, for :attr:`Paired.verdict` (default
            ``True``; ``False`` for a loss or a calibration error).
    """
    _check_confidence(confidence)
    seeds = tuple(sorted(set(a) & set(b)))
    if not higher_is_better:
        return replace(paired_difference(a, b, confidence), higher_is_better=False)
    n = len(seeds)
    if n == 0:
        return Paired(math.nan, None, None, None, 0, seeds, confidence, False,
                      "no seed finished in both: nothing to compare")
    xa = np.array([a[s] for s in seeds], dtype=np.float64)
    xb = np.array([b[s] for s in seeds], dtype=np.float64)
    d = xa - xb
    mean = float(np.mean(d))
    conclusive = n >= MIN_SEEDS
    note = "" if conclusive else f"too few seeds to conclude (n={n} < {MIN_SEEDS})"
    if n == 1:
        return Paired(mean, None, None, None, 1, seeds, confidence, False, note)
    if _no_spread(d):
        p = 1.0 if abs(mean) <= _SAME else 0.0
        return Paired(mean, mean, mean, p, n, seeds, confidence, conclusive, note)
    h = _t_half_width(d, confidence)
    p = float(sp.stats.ttest_rel(xa, xb).pvalue)
    return Paired(mean, mean - h, mean + h, p, n, seeds, confidence, conclusive, note)

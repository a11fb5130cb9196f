"""Robust summaries over seeds, as rliable recommends for few runs (Agarwal et al., 2021): the
interquartile mean with a stratified bootstrap interval, and the probability that a variant
beats the baseline. The bootstrap is :func:`scipy.stats.bootstrap` (percentile intervals, each
sample resampled on its own: stratified by variant), seeded so that a report is reproducible.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

__all__ = ["Robust", "iqm", "probability_of_improvement", "robust"]

#: bootstrap resamples (rliable uses 2000 to 50000; a few seeds need no more)
RESAMPLES = 2000


@dataclass(frozen=True)
class Robust:
    """A statistic with its bootstrap interval (``low``/``high`` ``None`` when it cannot be
    had: fewer than two values, or all equal)."""

    value: float
    low: float | None
    high: float | None
    n: int

    def format(self, scale: float = 100.0, digits: int = 2) -> str:
        if self.n == 0:
            return "-"
        num = lambda v: format(round(v * scale, digits) or 0.0, f".{digits}f")  # noqa: E731
        if self.low is None or self.high is None:
            return num(self.value)
        return f"{num(self.value)} [{num(self.low)}, {num(self.high)}]"

    def as_dict(self) -> dict[str, object]:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n}


def iqm(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The interquartile mean along ``axis``: the mean of the middle 50% of the values."""
    return np.asarray(_st.trim_mean(x, 0.25, axis=axis))


def probability_of_improvement(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """``P(X > Y) + P(X = Y) / 2`` over every pair of a value of ``x`` and one of ``y`` (the
    Mann-Whitney statistic over ``n * m``), along ``axis``."""
    a = np.moveaxis(np.asarray(x), axis, -1)[..., :, None]
    b = np.moveaxis(np.asarray(y), axis, -1)[..., None, :]
    return (a > b).mean((-2, -1)) + 0.5 * (a == b).mean((-2, -1))


def _interval(data: tuple[np.ndarray, ...], statistic: object) -> tuple[float | None,
                                                                      float | None]:
    if any(len(d) < 2 for d in data) or all(np.ptp(d) == 0 for d in data):
        return None, None
    with warnings.catch_warnings():  # a degenerate resample: scipy warns, the interval stands
        warnings.simplefilter("ignore")
        res = _st.bootstrap(data, statistic, n_resamples=RESAMPLES, confidence_level=0.95,
                            method="percentile", vectorized=True, axis=-1,
                            random_state=np.random.default_rng(0))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return (low, high) if np.isfinite(low) and np.isfinite(high) else (None, None)


def robust(values: Sequence[float], baseline: Sequence[float] | None = None,
           higher_is_better: bool = True) -> tuple[Robust, Robust | None]:
    """The IQM of ``values`` with its bootstrap interval, and (given the baseline's values)
    the probability that a seed of this variant beats one of the baseline (in the metric's
    direction) with its bootstrap interval."""
    x = np.asarray(list(values), dtype=np.float64)
    if len(x) == 0:
        return Robust(float("nan"), None, None, 0), None
    low, high = _interval((x,), iqm)
    mid = Robust(float(iqm(x)), low, high, len(x))
    if baseline is None or len(baseline) == 0:
        return mid, None
    y = np.asarray(list(baseline), dtype=np.float64)
    if not higher_is_better:
        x, y = -x, -y
    low, high = _interval((x, y), probability_of_improvement)
    return mid, Robust(float(probability_of_improvement(x, y)), low, high, len(x))

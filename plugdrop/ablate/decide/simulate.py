"""Whole ablations simulated at once (numpy): a design's operating characteristics before any
compute is spent (the statistics of ``plugdrop plan``).

:func:`plan` draws ``reps`` ablations whose variants have true ``effects`` (in sd of the paired
difference) and runs them through the decision rule of :func:`~.verdicts.decide`, vectorised:
the same :func:`~.verdicts.moments` and :func:`~.verdicts.advance` on arrays of ``reps``
copies, with the same boundaries (a test proves both make the same decisions on the same
values). It reports per variant the shares of better / worse / equivalent / inconclusive /
dropped, the mean seeds and the share decided at the first look, the false-verdict rate (the
share of ablations where a variant with effect 0 is called better or worse, or one with an
effect is called the wrong way, with its standard error), and the same for the fixed design
at ``max`` seeds (paired t-tests, Holm over the variants, as the runner's fixed design).
``design="legacy"`` runs the rule of ``design.py`` before issue 34 instead (Bonferroni,
Pocock-type spending, union-bound t-intervals), for comparison.

Noise (:data:`NOISES`): the paired difference of variant ``j`` at seed ``s`` is
``effect_j + sqrt(rho) u_s + sqrt(1 - rho) v_js`` with ``u`` (the baseline's share, common to
all variants of a seed) and ``v`` independent, standardised draws of one law: ``normal``,
``t3`` (Student t with 3 degrees of freedom) or ``skewed`` (a centred lognormal, scaled so
that the difference itself has skewness 1.75). ``rho = 0.5`` (default) is two runs of equal
noise, the baseline's and the variant's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from . import _scipy as sp
from .boundaries import DEFAULT_SPENDING, Spending
from .passing import Graph
from .verdicts import (BETTER, EQUIVALENT, INCONCLUSIVE, OPEN, WORSE, SeqDesign, State,
                       advance, boundary, moments)

__all__ = ["NOISES", "SKEWNESS", "Characteristics", "Share", "characteristics", "draw",
           "fixed_run", "legacy_run", "plan", "run", "seeds_needed"]

NOISES = ("normal", "t3", "skewed")
#: skewness of the paired differences under ``noise="skewed"``
SKEWNESS = 1.75


def _lognormal_sigma(skew: float) -> float:
    def excess(s: float) -> float:  # the lognormal's skewness at sigma s, minus the target
        return (math.exp(s * s) + 2) * math.sqrt(math.expm1(s * s)) - skew

    return float(sp.optimize.brentq(excess, 1e-6, 5.0))


def _standard(law: str, shape: tuple[int, ...], rng: np.random.Generator, skew: float
              ) -> np.ndarray:
    if law == "normal":
        return rng.standard_normal(shape)
    if law == "t3":
        return rng.standard_t(3, shape) / math.sqrt(3.0)
    s = _lognormal_sigma(skew)
    x = rng.lognormal(0.0, s, shape)
    return (x - math.exp(s * s / 2)) / math.sqrt(math.expm1(s * s) * math.exp(s * s))


def draw(effects: Sequence[float], seeds: int, reps: int, noise: str = "normal",
         rng: np.random.Generator | None = None, rho: float = 0.5) -> np.ndarray:
    """Paired differences ``(reps, variants, seeds)`` (see the module's noise model).

    Raises:
        ValueError: for an unknown ``noise`` or ``rho`` outside ``[0, 1)``.
    """
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {', '.join(NOISES)}, got {noise!r}")
    if not 0.0 <= rho < 1.0:
        raise ValueError(f"rho must lie in [0, 1), got {rho!r}")
    rng = rng if rng is not None else np.random.default_rng(0)
    mu = np.asarray(effects, dtype=np.float64)
    # each part's skewness so that the sum has SKEWNESS: rho^1.5 g + (1 - rho)^1.5 g
    skew = SKEWNESS / (rho ** 1.5 + (1.0 - rho) ** 1.5)
    u = _standard(noise, (reps, 1, seeds), rng, skew)
    v = _standard(noise, (reps, len(mu), seeds), rng, skew)
    return mu[None, :, None] + math.sqrt(rho) * u + math.sqrt(1.0 - rho) * v


def run(design: SeqDesign, diffs: np.ndarray, groups: Sequence[int] | None = None
        ) -> tuple[np.ndarray, np.ndarray]:
    """The verdict codes (:data:`~.verdicts.CODES`) and deciding looks (1-based) of
    ``design`` over ``diffs`` ``(R, V, S)``: :func:`~.verdicts.decide`'s rule, vectorised."""
    R, V, _ = diffs.shape
    graph = design.graph_for(V)
    s = State.start(R, graph)
    nmax = design.looks[-1]
    grp = None if groups is None else np.asarray(groups, dtype=np.int64)
    for k, stats in enumerate(moments(diffs, design.looks)):
        sched, caps = design.looks[:k + 1], (nmax,) * (k + 1)

        def bound(level: np.ndarray, mask: np.ndarray) -> np.ndarray:
            out = np.full(level.shape, np.inf)
            for lv in np.unique(level[mask]):
                out[mask & (level == lv)] = boundary(design, sched, caps, float(lv))
            return out

        eq = np.full((R, V), np.inf)
        if design.margin > 0:
            eq[:] = [boundary(design, sched, caps, w * design.alpha, 1) for w in graph.weights]
        advance(s, k, stats, bound, eq, design.alpha, design.margin, grp, nmax == design.looks[k])
    return s.code, s.look


def legacy_run(looks: Sequence[int], diffs: np.ndarray, alpha: float = 0.05,
               margin: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The rule of ``design.py`` before issue 34 (no grids), vectorised: Bonferroni over
    the variants, Pocock-type spending over the looks, the running intersection of
    t-intervals at level ``1 - a_k``."""
    R, V, _ = diffs.shape
    nmax = looks[-1]
    g = [math.log1p((math.e - 1.0) * n / nmax) for n in looks]
    w = np.diff([0.0] + g)
    code = np.zeros((R, V), np.int8)
    at = np.zeros((R, V), np.int64)
    lows, highs = np.full((R, V), -np.inf), np.full((R, V), np.inf)
    for k, n in enumerate(looks):
        d = diffs[:, :, :n]
        mean, sd = d.mean(-1), d.std(-1, ddof=1)
        a_k = alpha / V * w[k]
        flat = sd <= 1e-12 * np.maximum(1.0, np.abs(mean))
        h = np.where(flat, 0.0, sp.special.stdtrit(n - 1, 1.0 - a_k / 2.0) * sd / math.sqrt(n))
        lo, hi = np.maximum(lows, mean - h), np.minimum(highs, mean + h)
        miss = lo > hi
        lo, hi = np.where(miss, mean - h, lo), np.where(miss, mean + h, hi)
        live = code == OPEN
        lows, highs = np.where(live, lo, lows), np.where(live, hi, highs)
        new = np.where(lo > 0, BETTER, np.where(hi < 0, WORSE, np.where(
            (-margin < lo) & (hi < margin), EQUIVALENT,
            INCONCLUSIVE if n == nmax else OPEN)))
        at = np.where(live & (new != OPEN), k + 1, at)
        code = np.where(live, new, code).astype(np.int8)
    return code, at


def fixed_run(diffs: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """The runner's fixed design on all seeds: paired t-tests, Holm over the variants;
    better / worse, else inconclusive (no clear difference)."""
    R, V, n = diffs.shape
    mean, sd = diffs.mean(-1), diffs.std(-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(sd > 0, mean / (sd / math.sqrt(n)), np.sign(mean) * np.inf)
    p = np.nan_to_num(2.0 * sp.special.stdtr(n - 1, -np.abs(t)), nan=1.0)
    order = np.argsort(p, 1)
    ps = np.take_along_axis(p, order, 1)
    ok = np.cumprod(ps <= alpha / (V - np.arange(V)), 1).astype(bool)
    rej = np.zeros((R, V), bool)
    np.put_along_axis(rej, order, ok, 1)
    return np.where(rej, np.where(mean > 0, BETTER, WORSE), INCONCLUSIVE).astype(np.int8)


@dataclass(frozen=True)
class Share:
    """One variant's operating characteristics: its true ``effect`` (sd), the shares of each
    verdict, the mean seeds it used and the share decided at the first look."""

    effect: float
    better: float
    worse: float
    equivalent: float
    inconclusive: float
    dropped: float
    mean_seeds: float
    at_first: float


@dataclass(frozen=True)
class Characteristics:
    """What :func:`plan` reports. ``false_verdict_rate`` with its binomial standard error
    ``false_se``; ``fixed``: the same for the fixed design at ``max`` seeds."""

    variants: tuple[Share, ...]
    false_verdict_rate: float
    false_se: float
    reps: int
    design: str
    fixed: Characteristics | None = None

    def as_json(self) -> dict[str, Any]:
        """The ``plugdrop plan --json`` document of issue 34."""
        keys = ("effect", "better", "worse", "equivalent", "inconclusive", "mean_seeds")
        out: dict[str, Any] = {"variants": [{k: asdict(v)[k] for k in keys}
                                            for v in self.variants],
                               "false_verdict_rate": self.false_verdict_rate}
        if self.fixed is not None:
            out["fixed"] = {k: v for k, v in self.fixed.as_json().items() if k != "reps"}
        out["reps"] = self.reps
        return out


def characteristics(effects: np.ndarray, code: np.ndarray, at: np.ndarray,
                    looks: Sequence[int], name: str) -> Characteristics:
    """The operating characteristics of verdict codes ``code`` and deciding looks ``at``
    (``(R, V)``, as :func:`run` gives them) of variants with true ``effects``."""
    reps = code.shape[0]
    seeds = np.asarray(looks)[np.clip(at, 1, len(looks)) - 1]
    seeds = np.where(at > 0, seeds, looks[-1])
    wrong = ((effects == 0) & ((code == BETTER) | (code == WORSE))) | \
        ((effects > 0) & (code == WORSE)) | ((effects < 0) & (code == BETTER))
    rate = float(wrong.any(1).mean())
    frac = (code[:, :, None] == np.arange(1, 6)).mean(0)           # (V, 5): better..dropped
    shares = tuple(Share(float(e), float(f[0]), float(f[1]), float(f[2]), float(f[3]),
                         float(f[4]), float(seeds[:, j].mean()), float((at[:, j] == 1).mean()))
                   for j, (e, f) in enumerate(zip(effects, frac)))
    return Characteristics(shares, rate, math.sqrt(max(rate * (1 - rate), 1e-12) / reps), reps,
                           name)


def plan(effects: Sequence[float], seeds: tuple[int, int] = (3, 12), step: int = 1,
         alpha: float = 0.05, noise: str = "normal", reps: int = 20000,
         spending: Spending | str = DEFAULT_SPENDING, margin: float = 0.0,
         passing: bool = True, design: str = "sequential", seed: int = 0,
         groups: Sequence[int] | None = None, rho: float = 0.5,
         graph: Graph | None = None) -> Characteristics:
    """Simulate ``reps`` ablations and report their operating characteristics.

    Args:
        effects: each variant's true difference to the baseline, in sd of the paired
            difference (positive: better).
        seeds: ``(min, max)`` of the adaptive design; ``step``: seeds per round.
        alpha: the family-wise error rate.
        noise: ``"normal"``, ``"t3"`` or ``"skewed"`` (see the module).
        reps: the number of simulated ablations.
        spending: the spending function (or its name, as :meth:`Spending.parse` reads it).
        margin: the equivalence margin in sd of the paired difference (0: none).
        passing: pass alpha on (Holm); ``False``: Bonferroni.
        design: ``"sequential"`` (the new rule) or ``"legacy"`` (the rule before issue 34).
        seed: the random seed (the same seed gives the same ablations).
        groups: per variant its grid, for the race (``None``: no race).
        rho: the baseline's share of the noise of a paired difference.
        graph: a graph of your own for passing alpha on.

    Raises:
        ValueError: for an unknown ``noise``, ``design`` or spending.
    """
    if design not in ("sequential", "legacy"):
        raise ValueError(f"design must be 'sequential' or 'legacy', got {design!r}")
    sp = Spending.parse(spending) if isinstance(spending, str) else spending
    d_ = SeqDesign.plan(seeds[0], seeds[1], step, alpha=alpha, spending=sp, margin=margin,
                        passing=passing, graph=graph)
    diffs = draw(effects, seeds[1], reps, noise, np.random.default_rng(seed), rho)
    mu = np.asarray(effects, dtype=np.float64)
    if design == "legacy":
        code, at = legacy_run(d_.looks, diffs, alpha, margin)
        name = "legacy: Bonferroni, Pocock-type, union bound"
    else:
        code, at = run(d_, diffs, groups)
        name = f"{sp}, {d_.graph_for(len(mu)).name}"
    fixed = fixed_run(diffs, alpha)
    fx = characteristics(mu, fixed, np.full(fixed.shape, len(d_.looks)), d_.looks, "fixed, Holm")
    out = characteristics(mu, code, at, d_.looks, name)
    return Characteristics(out.variants, out.false_verdict_rate, out.false_se, reps, name, fx)


def seeds_needed(effect: float, level: float, power: float = 0.8, limit: int = 10_000
                 ) -> int | None:
    """About how many seeds a variant with a true ``effect`` (in sd of the paired
    difference: for an ablation, the observed mean over the observed sd) needs to be called
    better or worse with probability ``power`` by a two-sided paired t-test at ``level`` (its
    share of alpha): the fixed-design count, from the noncentral t. A group-sequential design
    with that many seeds at most has less power (the default spending needs about 10-20%
    more seeds for the same; :func:`plan` tells exactly); ``None`` for no effect or beyond
    ``limit``.

    Raises:
        ValueError: for ``level`` or ``power`` outside ``(0, 1)``.
    """
    if not (0.0 < level < 1.0 and 0.0 < power < 1.0):
        raise ValueError(f"level and power must lie in (0, 1), got {level!r}, {power!r}")
    d = abs(float(effect))
    if not d > 0 or not math.isfinite(d):
        return None

    def reached(n: int) -> bool:
        c, nc = float(sp.special.stdtrit(n - 1, 1.0 - level / 2.0)), d * math.sqrt(n)
        wrong_way = float(np.nan_to_num(sp.stats.nct.cdf(-c, n - 1, nc)))  # nan: underflow
        right_way = float(sp.stats.nct.sf(c, n - 1, nc))
        if math.isnan(right_way):  # a noncentrality beyond scipy's reach (an effect of 1e300)
            right_way = 1.0 if nc > c else 0.0
        return right_way + wrong_way >= power

    # bracket the count around the normal approximation (a few evaluations), then bisect:
    # not reached(lo) (one seed tests nothing), reached(hi)
    z = float(sp.special.ndtri(1.0 - level / 2.0) + sp.special.ndtri(power))
    ratio = z / d  # an effect of 1e-300 sd: beyond any limit ((z / d) ** 2 overflows)
    guess = limit if ratio >= math.sqrt(limit) else int(min(max(2.0, math.ceil(ratio ** 2)
                                                                + 1.0), limit))
    lo, hi, step = 1, guess, 1
    if reached(hi):
        while hi - step > 1 and reached(hi - step):
            hi, step = hi - step, 2 * step
        lo = max(1, hi - step)
    else:
        while not reached(hi):
            if hi >= limit:
                return None
            lo, hi, step = hi, min(hi + step, limit), 2 * step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reached(mid) else (mid, hi)
    return hi

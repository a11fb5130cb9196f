"""The decision rule of an adaptive (group-sequential) ablation as one pure function,
:func:`decide`, and the vectorised kernel it shares with the simulator (``simulate.py``).

Contract of :func:`decide` (to replace ``Design._look``/``replay``'s statistics):

* **In**: a :class:`SeqDesign` (planned looks, ``alpha``, spending, equivalence ``margin``,
  alpha passing) and ``diffs``, shape ``(variants, seeds)``: per variant its paired difference
  to the baseline seed by seed, oriented so that positive is better, in display units; ``nan``
  for a run that failed or was not trained (a variant decided earlier is never trained on).
  Only the seeds of complete looks are passed: the looks taken are the planned ones up to
  ``seeds`` (or ``looks=``, with ``plan_max=`` when ``max`` changed on resume). Optional
  ``groups``: per variant a grid id (``-1``: none) for the race.
* **Out**: an :class:`Verdicts`: per variant a :class:`Verdict` (``open``, ``better``,
  ``worse``, ``equivalent``, ``inconclusive``, ``dropped``), the 1-based look that decided
  it, its seeds and pairs, mean, the interval ``mean -+ c * sd / sqrt(n)`` at its level (the
  boundary ``c`` of its own looks, so the interval lies above 0 exactly when it is called
  better), the level, the repeated and the adjusted p-value, the skewness of its differences
  with a warning when it is large; and the procedure that ran. Nothing else is read: the same
  values give the same decisions, so a resumed ablation replays them.

The rule at each look, for the open variants with at least 2 pairs: **better** / **worse** when
``t > c`` / ``t < -c``, ``c`` the boundary at the variant's current level ``w * alpha``
(weights from the graph, see ``passing.py``); each rejection passes its weight on and the others
are tested again at the same look. Then **equivalent** when the two one-sided tests at the
variant's initial level (one-sided boundaries ``e``) both reject: ``mean -+ e * se`` within
``(-margin, margin)`` (zero variance: ``|mean| < margin``). At the final look an open variant is
**inconclusive**; before it, an open variant of a grid whose interval lies below the best
rival's is **dropped**. Identical differences (no spread) give ``t = +-inf`` (or 0 for a zero
mean) and a zero-width interval, without dividing by zero.

Guarantees. Better/worse verdicts: the family-wise error rate over all variants and looks is at
most ``alpha`` (each variant's test has level ``w * alpha`` over its looks, exactly under normal
differences; the graph is the shortcut of a closed test, see ``passing.py``). Equivalence: each
variant's two one-sided tests have level ``w0 * alpha`` (its initial share), so false
equivalence verdicts over all variants are also at most ``alpha``. Alpha is not passed on to
them: the closed test that lets a rejected variant's share go to the others covers the
hypotheses "no difference" only, while equivalence tests "a difference of at least the
margin", which can be true of the very variants whose verdicts passed their share on. Unlike
the old union-bound intervals, the intervals are not simultaneous: each is its variant's at
its level and look, and agrees with its verdict (``eq_low``/``eq_high`` for equivalence).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .boundaries import DEFAULT_SPENDING, Spending, critical_values, repeated_p
from .passing import Graph, adjusted_p, pass_on
from .skew import pooled_skewness, skew_warning, skewness

__all__ = ["CODES", "Verdicts", "SeqDesign", "State", "Verdict", "advance", "boundary", "decide",
           "moments"]

#: verdict codes of the kernel, by index
CODES = ("open", "better", "worse", "equivalent", "inconclusive", "dropped")
OPEN, BETTER, WORSE, EQUIVALENT, INCONCLUSIVE, DROPPED = range(6)
_SAME = 1e-12  # relative spread under which differences count as identical


@dataclass(frozen=True)
class SeqDesign:
    """A group-sequential design over seeds.

    Args:
        looks: the planned number of seeds at each look, increasing, the first at least 2.
        alpha: the family-wise error rate of better/worse verdicts (default 0.05).
        spending: how each variant's level is spent over the looks
            (default :data:`~plugdrop.ablate.report.boundaries.DEFAULT_SPENDING`).
        margin: the equivalence margin in the differences' units; 0 (default): none.
        passing: pass a decided variant's alpha on to the others (Holm, graphical); ``False``:
            Bonferroni.
        graph: a graph of your own (overrides ``passing``).

    Raises:
        ValueError: for looks that do not increase from 2, ``alpha`` outside ``(0, 1)`` or a
            negative margin.
    """

    looks: tuple[int, ...]
    alpha: float = 0.05
    spending: Spending = DEFAULT_SPENDING
    margin: float = 0.0
    passing: bool = True
    graph: Graph | None = None

    def __post_init__(self) -> None:
        lk = tuple(int(n) for n in self.looks)
        if not lk or lk[0] < 2 or any(b <= a for a, b in zip(lk, lk[1:])):
            raise ValueError(f"looks must increase from at least 2 seeds, got {list(lk)}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must lie in (0, 1), got {self.alpha!r}")
        if self.margin < 0:
            raise ValueError(f"margin must be >= 0, got {self.margin!r}")
        object.__setattr__(self, "looks", lk)

    @classmethod
    def plan(cls, min: int, max: int, step: int = 1, *, alpha: float = 0.05,
             spending: Spending = DEFAULT_SPENDING, margin: float = 0.0, passing: bool = True,
             graph: Graph | None = None) -> SeqDesign:
        """Looks at ``min, min + step, ..., max`` seeds; the rest as the constructor's."""
        return cls(tuple(range(min, max, step)) + (max,), alpha, spending, margin, passing,
                   graph)

    def graph_for(self, m: int) -> Graph:
        """The graph over ``m`` variants."""
        if self.graph is not None:
            if len(self.graph.weights) != m:
                raise ValueError(f"the graph has {len(self.graph.weights)} hypotheses for "
                                 f"{m} variants")
            return self.graph
        return Graph.holm(m) if self.passing else Graph.bonferroni(m)


def boundary(design: SeqDesign, schedule: Sequence[int], n_max: Sequence[int], level: float,
             sides: int = 2) -> float:
    """The critical value at the last of a variant's looks ``schedule`` (its numbers of pairs),
    for its ``level``; ``n_max``: the maximum in force at each of them. A schedule that is a
    prefix of the plan takes the plan's own boundaries (the same values, computed once)."""
    k = len(schedule)
    if level <= 0.0 or k == 0:
        return math.inf
    if tuple(schedule) == design.looks[:k] and all(m == design.looks[-1] for m in n_max):
        return float(critical_values(design.looks, level, design.spending, None, sides)[k - 1])
    return float(critical_values(schedule, level, design.spending, n_max, sides)[-1])


def _p(design: SeqDesign, schedule: Sequence[int], n_max: Sequence[int], abs_t: float
       ) -> float:
    """The repeated p-value at the last of a variant's looks (1 before any)."""
    k = len(schedule)
    if k == 0:
        return 1.0
    if tuple(schedule) == design.looks[:k] and all(m == design.looks[-1] for m in n_max):
        return repeated_p(design.looks, abs_t, design.spending, None, 2, k - 1)
    return repeated_p(schedule, abs_t, design.spending, n_max)


def moments(diffs: np.ndarray, cols: Sequence[int]
            ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """``(n, mean, sd, flat)`` of ``diffs`` (shape ``(R, V, S)``, ``nan`` ignored) over the
    first ``c`` seeds for each ``c`` in ``cols``: Welford's updates column by column, so that
    every copy gets the same arithmetic whatever ``R``. ``flat``: no spread up to rounding."""
    shape = diffs.shape[:2]
    n, mean, m2 = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    lo, hi = np.full(shape, np.inf), np.full(shape, -np.inf)
    out, want = [], sorted(set(int(c) for c in cols))
    for j in range(max(want)):
        x = diffs[:, :, j]
        ok = ~np.isnan(x)
        xv = np.where(ok, x, 0.0)
        n = n + ok
        delta = np.where(ok, xv - mean, 0.0)
        mean = mean + np.where(ok, delta / np.maximum(n, 1), 0.0)
        m2 = m2 + np.where(ok, delta * (xv - mean), 0.0)
        lo, hi = np.where(ok, np.minimum(lo, xv), lo), np.where(ok, np.maximum(hi, xv), hi)
        if j + 1 in want:
            sd = np.sqrt(np.maximum(m2, 0.0) / np.maximum(n - 1, 1))
            top = np.maximum(1.0, np.maximum(np.abs(lo), np.abs(hi)))
            flat = (n >= 1) & (hi - lo <= _SAME * top)
            out.append((n.astype(np.int64), mean.copy(), sd, flat))
    return [out[want.index(int(c))] for c in cols]


@dataclass
class State:
    """Where ``R`` copies of an ablation of ``V`` variants stand (arrays ``(R, V)``)."""

    code: np.ndarray
    look: np.ndarray
    n: np.ndarray
    mean: np.ndarray
    se: np.ndarray
    t: np.ndarray
    low: np.ndarray
    high: np.ndarray
    level: np.ndarray
    crit: np.ndarray
    eq_low: np.ndarray
    eq_high: np.ndarray
    behind: np.ndarray
    weights: np.ndarray
    trans: np.ndarray

    @classmethod
    def start(cls, reps: int, graph: Graph) -> State:
        """Every variant open, not looked at."""
        shape = (reps, len(graph.weights))
        nan = lambda: np.full(shape, np.nan)  # noqa: E731
        w, g = graph.arrays(reps)
        return cls(np.zeros(shape, np.int8), np.zeros(shape, np.int64),
                   np.zeros(shape, np.int64), nan(), nan(), nan(), np.full(shape, -np.inf),
                   np.full(shape, np.inf), nan(), nan(), np.full(shape, -np.inf),
                   np.full(shape, np.inf), np.full(shape, -1, np.int64), w, g)


def _interval(mean: np.ndarray, se: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(invalid="ignore"):
        h = np.where(se == 0.0, 0.0, c * se)
    return mean - h, mean + h


def advance(s: State, k: int, stats: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
            bound: Callable[[np.ndarray, np.ndarray], np.ndarray], eq: np.ndarray,
            alpha: float, margin: float, groups: np.ndarray | None, last: bool) -> None:
    """Look ``k`` (0-based) at ``R`` copies at once, in place: ``stats`` from :func:`moments`;
    ``bound(level, mask)`` the two-sided boundary of each variant at ``level`` (``(R, V)``);
    ``eq`` the one-sided equivalence boundaries; ``groups`` the grid of each variant."""
    n, mean, sd, flat = stats
    test = (s.code == OPEN) & (n >= 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.where(flat, 0.0, sd / np.sqrt(np.maximum(n, 1)))
        t = np.where(flat, np.where(np.abs(mean) <= _SAME, 0.0, np.sign(mean) * np.inf),
                     mean / se)
    s.n, s.mean = np.where(test, n, s.n), np.where(test, mean, s.mean)
    s.se, s.t = np.where(test, se, s.se), np.where(test, t, s.t)
    rows = np.arange(s.code.shape[0])
    for _ in range(s.code.shape[1]):
        live = test & (s.code == OPEN)
        level = s.weights * alpha
        c = np.where(live, bound(level, live), np.inf)
        hit = live & (np.abs(s.t) > c)
        if not hit.any():
            break
        j = np.where(hit.any(1), np.argmax(hit, 1), -1)
        r = rows[j >= 0]
        jj = j[j >= 0]
        s.code[r, jj] = np.where(s.t[r, jj] > 0, BETTER, WORSE)
        s.look[r, jj] = k + 1
        s.level[r, jj], s.crit[r, jj] = level[r, jj], c[r, jj]
        s.low[r, jj], s.high[r, jj] = _interval(s.mean[r, jj], s.se[r, jj], c[r, jj])
        s.weights, s.trans = pass_on(s.weights, s.trans, j)
    live = test & (s.code == OPEN)
    level = s.weights * alpha
    c = np.where(live, bound(level, live), np.inf)
    low, high = _interval(s.mean, s.se, c)
    s.level, s.crit = np.where(live, level, s.level), np.where(live, c, s.crit)
    s.low, s.high = np.where(live, low, s.low), np.where(live, high, s.high)
    if margin > 0:
        elo, ehi = _interval(s.mean, s.se, eq)
        s.eq_low, s.eq_high = np.where(live, elo, s.eq_low), np.where(live, ehi, s.eq_high)
        same = live & (-margin < elo) & (ehi < margin)
        s.code = np.where(same, EQUIVALENT, s.code).astype(np.int8)
        s.look = np.where(same, k + 1, s.look)
    if last:
        left = s.code == OPEN
        s.code = np.where(left, INCONCLUSIVE, s.code).astype(np.int8)
        s.look = np.where(left, k + 1, s.look)
    elif groups is not None:
        _race(s, k, groups)


def _race(s: State, k: int, groups: np.ndarray) -> None:
    """Drop an open variant of a grid whose interval lies below its best rival's."""
    g = np.asarray(groups)
    rival = (g[:, None] == g[None, :]) & (g[:, None] >= 0) & ~np.eye(len(g), dtype=bool)
    lows = np.where(np.isfinite(s.low), s.low, -np.inf)               # (R, V)
    cand = np.where(rival[None, :, :], lows[:, None, :], -np.inf)     # (R, v, rival)
    best = cand.max(-1)
    who = cand.argmax(-1)
    drop = (s.code == OPEN) & (s.n >= 2) & np.isfinite(best) & (s.high < best)
    s.code = np.where(drop, DROPPED, s.code).astype(np.int8)
    s.look = np.where(drop, k + 1, s.look)
    s.behind = np.where(drop, who, s.behind)


@dataclass(frozen=True)
class Verdict:
    """One variant's standing (see the module's contract). ``look``: 1-based look that
    decided it (0: open); ``seeds``: the seeds of that look (or of the last look taken);
    ``n``: its pairs; ``level``/``crit``: its level and boundary there; ``p``: its repeated
    p-value, ``p_adjusted`` the graph's adjustment of those (``None`` unless asked for);
    ``eq_low``/``eq_high``: the interval of the two one-sided tests (at its initial share of
    alpha, one-sided each; within the margin: equivalent); ``skewness`` of its differences
    and whether it is large; ``behind``: the index of the rival a dropped variant lies behind.
    """

    verdict: str
    look: int
    seeds: int
    n: int
    mean: float
    low: float
    high: float
    level: float
    crit: float
    p: float | None
    p_adjusted: float | None
    eq_low: float
    eq_high: float
    skewness: float
    skew_warning: bool
    behind: int | None


@dataclass(frozen=True)
class Verdicts:
    """What :func:`decide` says: ``variants`` (one :class:`Verdict` each, in order), the
    ``procedure`` that passed alpha on, whether every variant is decided, and the pooled
    skewness of all differences with its warning (see :func:`pooled_skewness`)."""

    variants: tuple[Verdict, ...]
    procedure: str
    complete: bool
    skewness: float = math.nan
    skew_warning: bool = False


def decide(design: SeqDesign, diffs: np.ndarray | Sequence[Sequence[float]],
           groups: Sequence[int] | None = None, looks: Sequence[int] | None = None,
           plan_max: Sequence[int] | None = None, p_values: bool = True) -> Verdicts:
    """Replay ``design`` over the paired differences ``diffs`` (see the module's contract).

    Args:
        design: the design.
        diffs: ``(variants, seeds)``, oriented differences, ``nan`` where missing.
        groups: per variant its grid (``-1``: none); variants of one grid race.
        looks: the seeds at each look taken (default: the planned looks that ``diffs``
            covers).
        plan_max: the maximum in force at each look (default: the plan's).
        p_values: compute the repeated and adjusted p-values (a few tenths of a second the
            first time per schedule).

    Raises:
        ValueError: for ``diffs`` not two-dimensional, or looks beyond its seeds.
    """
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 2:
        raise ValueError(f"diffs must be (variants, seeds), got shape {d.shape}")
    taken = [int(x) for x in (looks if looks is not None else
                              [x for x in design.looks if x <= d.shape[1]])]
    if taken and taken[-1] > d.shape[1]:
        raise ValueError(f"a look at {taken[-1]} seeds, but diffs has {d.shape[1]}")
    caps = [int(x) for x in plan_max] if plan_max is not None else \
        [design.looks[-1]] * len(taken)
    V = d.shape[0]
    graph = design.graph_for(V)
    s = State.start(1, graph)
    sched: list[list[int]] = [[] for _ in range(V)]
    caps_of: list[list[int]] = [[] for _ in range(V)]
    grp = None if groups is None else np.asarray(groups, dtype=np.int64)
    for k, stats in enumerate(moments(d[None], taken) if taken else []):
        last = taken[k] >= caps[k]
        for v in range(V):
            nv = int(stats[0][0, v])
            if s.code[0, v] == OPEN and nv >= 2 and (not sched[v] or nv > sched[v][-1]):
                sched[v].append(nv)
                caps_of[v].append(nv if last and nv < caps[k] else caps[k])

        def bound(level: np.ndarray, mask: np.ndarray) -> np.ndarray:
            return np.array([[boundary(design, sched[v], caps_of[v], float(level[0, v]))
                              if mask[0, v] else math.inf for v in range(V)]])

        eq = np.array([[boundary(design, sched[v], caps_of[v], graph.weights[v] * design.alpha,
                                 1) if design.margin > 0 else math.inf for v in range(V)]])
        advance(s, k, stats, bound, eq, design.alpha, design.margin, grp, last)
    p: list[float | None] = [None] * V
    for v in range(V) if p_values else ():
        q, lv = _p(design, sched[v], caps_of[v], abs(float(s.t[0, v]))), float(s.level[0, v])
        if s.code[0, v] in (BETTER, WORSE):      # the interpolation agrees with the verdict
            q = min(q, lv)
        elif sched[v] and lv > 0:
            q = max(q, float(np.nextafter(lv, 2.0)))
        p[v] = q
    padj = adjusted_p([1.0 if x is None else x for x in p], graph) if p_values else None
    out = []
    for v in range(V):
        code, lk = int(s.code[0, v]), int(s.look[0, v])
        seeds = taken[lk - 1] if lk else (taken[-1] if taken else 0)
        sk = skewness(d[v, :taken[-1]] if taken else d[v, :0])
        out.append(Verdict(CODES[code], lk, seeds, int(s.n[0, v]), float(s.mean[0, v]),
                           float(s.low[0, v]), float(s.high[0, v]), float(s.level[0, v]),
                           float(s.crit[0, v]), p[v], None if padj is None else float(padj[v]),
                           float(s.eq_low[0, v]), float(s.eq_high[0, v]), sk,
                           skew_warning(sk, int(s.n[0, v])),
                           int(s.behind[0, v]) if s.behind[0, v] >= 0 else None))
    pooled, count = pooled_skewness(d[:, :taken[-1]] if taken else d[:, :0])
    return Verdicts(tuple(out), graph.name, bool((s.code != OPEN).all()), pooled,
                   skew_warning(pooled, count, 0.5))

"""The adaptive seed design: seeds run in rounds, and a variant stops receiving seeds once its
difference to the baseline is decided.

After each round (a *look*) the open variants are decided by the exact group-sequential design
(:func:`~.verdicts.decide`): each variant's per-seed differences to the baseline (the same
seeds, oriented so that positive means better, in display units) give a paired t-statistic,
compared with the boundary of the variant's share of ``alpha`` at that look. The boundaries are
exact under normal differences (:mod:`.boundaries`): the chance of crossing at a look is the
alpha the config's ``spending`` function gives it (by information fraction, so a look at an
unplanned number of seeds, after a failed run, keeps the error rate). A variant called better
or worse passes its share on to the open ones (``passing: holm``, the graphical approach of
Maurer and Bretz, :mod:`.passing`): the family-wise error of better/worse verdicts over all
variants and looks stays at ``alpha``.

A variant is **better** when its interval lies above 0, **worse** below 0 (for a metric where
lower is better, such as ``val_nll``, the interval shown is of the metric minus the
baseline's, so better lies below 0 there), **equivalent** when the interval of its two
one-sided tests (at its initial share of alpha) lies within ``(-margin, margin)``; among the
variants of one grid (``dropblock[p=0.05]``, ``dropblock[p=0.1]``: the values of one
regularizer race), one whose interval lies entirely below the best one's is **dropped**; at the
maximum number of seeds an open variant is **inconclusive**, with a forecast of the seeds an
effect of the size observed would need. The baseline runs as long as any variant is open.
Everything here is a pure function of the finished runs' values, so a resumed ablation replays
the same decisions with the same seeds.

A folder started by an older plugdrop keeps the design it started with (``Design(...,
legacy=True)``, :mod:`.legacy`: Bonferroni, Pocock-type spending, union-bound intervals).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..config import AblationConfig, DecisionRule, SeedPlan
from . import legacy
from .decision import (BETTER, DROPPED, EQUIVALENT, INCONCLUSIVE, OPEN, WORSE, Decision,
                       Replay, annotated, grid_of)
from .legacy import spending, weights
from .skew import pooled_skewness, skew_warning
from .verdicts import Verdicts, SeqDesign, Verdict, decide

__all__ = ["BETTER", "DROPPED", "EQUIVALENT", "INCONCLUSIVE", "OPEN", "WORSE", "Decision",
           "Design", "Replay", "design_of", "spending", "weights"]


@dataclass(frozen=True)
class Design:
    """An adaptive comparison of ``variants`` with ``baseline``.

    Args:
        plan: the seeds and rounds.
        baseline: the reference variant.
        variants: the others, in config order.
        rule: the decision metric (its direction and display units), the family-wise error
            rate over every variant and look, the equivalence margin (display units:
            percentage points for accuracies), the spending function and alpha passing.
        legacy: decide as plugdrop did before the exact design (:mod:`.legacy`), for a folder
            an older version started.

    The variants of one grid are those whose names share the part before ``[``.
    """

    plan: SeedPlan
    baseline: str
    variants: tuple[str, ...]
    rule: DecisionRule
    legacy: bool = False

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

    @property
    def seq(self) -> SeqDesign:
        """The exact group-sequential design of :mod:`.verdicts` (looks, alpha, spending,
        margin in display units, alpha passing)."""
        return SeqDesign(tuple(self.plan.looks()), self.alpha, self.rule.spending, self.margin,
                         self.rule.passing == "holm")

    @property
    def procedure(self) -> str:
        """The procedure that decides, in words (the table's and the files' ``procedure``)."""
        if self.legacy:
            return legacy.PROCEDURE
        graph = self.seq.graph_for(max(len(self.variants), 1)).name
        passed = "passed on by" if self.rule.passing == "holm" else "split by"
        return (f"exact group-sequential t-tests, alpha {self.alpha:g} spent over the rounds "
                f"by {self.rule.spending}, {passed} {graph}")

    def replay(self, values: Mapping[str, Mapping[int, float | None]]) -> Replay:
        """Replay the design over ``values``: variant -> seed -> the decision metric of a
        finished run (``None`` for a failed run; a run not ended is absent)."""
        diffs = self.differences(values)
        if self.legacy:
            rep = legacy.replay(self.plan, self.baseline, self.variants, self.rule, values)
            for j, v in enumerate(self.variants):  # what the design never asked for is no pair
                diffs[j, rep.seeds_used(v):] = np.nan
            level = self.alpha / max(len(self.variants), 1)
            return self._annotated(rep, diffs, [level] * len(self.variants))
        looks, seeds = self.plan.looks(), self.plan.seeds()
        base = values.get(self.baseline, {})
        # the looks the baseline completed; decided there, each variant with the values it has
        full = next((k for k, n in enumerate(looks) if any(s not in base for s in seeds[:n])),
                    len(looks))
        first = self._decide(diffs, looks[:full], p_values=False)
        at = [v.look for v in first.variants] if first else [0] * len(self.variants)
        rounds: list[int] = []
        needed: list[tuple[str, int]] = []
        for k, n_k in enumerate(looks):
            open_ = [v for v, a in zip(self.variants, at) if a == 0 or a > k]
            if not open_:
                break
            rounds.append(n_k)
            needed = [(v, s) for v in [self.baseline, *open_] for s in seeds[:n_k]
                      if s not in values.get(v, {})]
            if needed:
                break
        taken = rounds[:-1] if needed else rounds
        for j, a in enumerate(at):  # a decided variant's later runs are none of the design's
            if 0 < a <= len(taken):
                diffs[j, looks[a - 1]:] = np.nan
        diffs[:, taken[-1] if taken else 0:] = np.nan
        out = self._decide(diffs, taken, p_values=True)
        state = {v: Decision(v, higher_is_better=self.higher_is_better) for v in self.variants}
        levels = [math.nan] * len(self.variants)
        if out is not None:
            for j, (v, vd) in enumerate(zip(self.variants, out.variants)):
                state[v] = self._decision(v, vd, diffs[j])
                levels[j] = vd.level
        rep = Replay(state, needed=needed, rounds=rounds, complete=not needed,
                     procedure=self.procedure)
        order = sorted((d.round, j) for j, d in enumerate(state.values()) if d.verdict != OPEN)
        rep.events = [{"round": r, "seeds": looks[r - 1], "variant": self.variants[j]}
                      for r, j in order]
        return self._annotated(rep, diffs, levels)

    def differences(self, values: Mapping[str, Mapping[int, float | None]]) -> np.ndarray:
        """``(variants, max seeds)``: each variant's difference to the baseline per seed of the
        plan, oriented so that positive is better, in display units; ``nan`` where either run
        is missing or failed (or their difference is not a finite number: a diverged run)."""
        seeds = self.plan.seeds()
        base = values.get(self.baseline, {})
        sign = 1.0 if self.higher_is_better else -1.0
        out = np.full((len(self.variants), len(seeds)), np.nan)
        for j, v in enumerate(self.variants):
            mine = values.get(v, {})
            for i, s in enumerate(seeds):
                a, b = mine.get(s), base.get(s)
                if a is not None and b is not None and math.isfinite(d := a - b):
                    out[j, i] = sign * self.scale * d
        return out

    def _decide(self, diffs: np.ndarray, looks: Sequence[int], p_values: bool
                ) -> Verdicts | None:
        if not looks:
            return None
        names = sorted({g for v in self.variants if (g := grid_of(v)) is not None})
        groups = [names.index(g) if (g := grid_of(v)) is not None else -1
                  for v in self.variants]
        return decide(self.seq, diffs, groups if names else None, looks=looks,
                      p_values=p_values)

    def _decision(self, v: str, vd: Verdict, diffs: np.ndarray) -> Decision:
        """A :class:`~.verdicts.Verdict` as the runner's :class:`Decision`: its round, the
        interval that agrees with its verdict, the adjusted p-value, the reason."""
        num = lambda x: float(x) if math.isfinite(x) else None  # noqa: E731
        n = int(np.count_nonzero(~np.isnan(diffs[:vd.seeds])))
        low, high = (vd.eq_low, vd.eq_high) if vd.verdict == EQUIVALENT else (vd.low, vd.high)
        up, down = ("above", "below") if self.higher_is_better else ("below", "above")
        level = f"at its level {vd.level:.3g}, {100 * (1 - self.alpha):g}% family-wise"
        behind = self.variants[vd.behind] if vd.behind is not None else None
        reason = {
            BETTER: f"its interval lies {up} 0 ({level})",
            WORSE: f"its interval lies {down} 0 ({level})",
            EQUIVALENT: f"its interval lies within +-{self.margin:g} (two one-sided tests)",
            INCONCLUSIVE: (f"its interval still holds 0 at {n} seeds, the maximum" if n >= 2
                           else f"{n} seed(s) finished in both: nothing to compare"),
            DROPPED: f"dropped: behind {behind} (its interval lies below {behind}'s)",
        }.get(vd.verdict, "still open")
        return Decision(v, vd.verdict, n, num(vd.mean), num(low), num(high), vd.p_adjusted,
                        vd.look if vd.verdict != OPEN else 0, reason, behind,
                        self.higher_is_better)

    def _annotated(self, rep: Replay, diffs: np.ndarray, levels: Sequence[float]) -> Replay:
        """``rep`` with each decision's skewness, forecast and procedure, and its events as
        the decisions are."""
        sk, count = pooled_skewness(diffs)
        pooled = (sk, skew_warning(sk, count, 0.5))
        for j, v in enumerate(self.variants):
            rep.decisions[v] = annotated(rep.decisions[v], diffs[j], levels[j],
                                         rep.procedure, pooled)
        rep.events = [{"round": e["round"], "seeds": e["seeds"],
                       **rep.decisions[e["variant"]].as_dict()} for e in rep.events]
        return rep

def design_of(cfg: AblationConfig, legacy: bool = False) -> Design | None:
    """The adaptive design of a config, or ``None`` for a fixed one (a list of seeds) or
    without a baseline; ``legacy``: the design of a folder an older plugdrop started
    (:func:`~plugdrop.ablate.config.legacy_design`)."""
    if cfg.plan is None or cfg.baseline is None:
        return None
    return Design(cfg.plan, cfg.baseline,
                  tuple(v for v in cfg.variant_names if v != cfg.baseline), cfg.decision,
                  legacy)

"""What a variant's runs say, with statistics over seeds: :func:`summarize`.

The verdicts compare each variant with the baseline on the config's decision metric
(``decide_on``, the last epoch's value). A fixed design (a list of seeds) tests the paired
differences with Holm's step-down adjustment over the variants, so the family-wise error stays
at ``alpha``; an adaptive design (``seeds: {min, max}``) takes the decisions of its replay
(:mod:`.sequential`: exact group-sequential boundaries, valid however often they were looked
at; a folder an older plugdrop started keeps its design).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import DecisionRule, legacy_design
from ..decide import OPEN, Decision, Replay, design_of, fixed_verdict, holm
from ..decide.stats import Interval, Paired, mean_ci, p_cell, paired_difference
from ..results import FAILED, FINISHED, INCOMPLETE, Ablation, Run, decision_values, number
from .robust import Robust, robust

__all__ = ["ACC", "VariantSummary", "failure", "open_verdict",
           "run_counts", "saved_runs", "summarize"]

#: Accuracies live in [0, 1]: their intervals are cut to it (no "104%").
ACC = (0.0, 1.0)


@dataclass
class VariantSummary:
    """What a variant's runs say, with the statistics over seeds.

    Attributes:
        variant: its name.
        is_baseline: whether it is the ablation's baseline.
        runs, finished, failed, incomplete: how many runs, by status (an adaptive design's
            runs count up to the seeds it gave the variant).
        final, best: final / best validation accuracy over the finished seeds (mean and CI).
        final_ema, best_ema: the same for the EMA weights, ``None`` without EMA.
        rule: how verdicts are decided (the config's ``decide_on``, ``alpha``, ``margin``).
        decided: its final value over the finished seeds (mean and CI).
        diff: the decision metric minus the baseline's, paired by seed (metric units);
            ``None`` for the baseline itself or without a baseline.
        diff_acc: final validation accuracy minus the baseline's, paired by seed (as
            ``diff`` when the decision metric is ``val_acc``).
        diff_ema: final EMA accuracy minus the baseline's.
        decision: the adaptive design's decision (``None`` for a fixed design).
        p_adjusted: Holm's adjusted p-value (fixed design) or the sequential one (adaptive).
        iqm, p_improve: robust summaries of the decision metric (:mod:`.robust`).
        seeds_used, seeds_max: an adaptive design's seeds for this variant and its maximum.
        epoch_time: median seconds per epoch, each run's first epoch left out (warm-up); of
            a ``program:``'s runs, the median seconds of a finished run (``run_time`` in
            ``results.json``).
        time_ratio: ``epoch_time`` over the baseline's.
        time_with_first: whether the runs had only a first epoch, so ``epoch_time`` includes it.
        failures: ``(run id, one-line error)`` of each failed run.
        records_acc: whether the runs record ``val_acc`` (plugdrop's trainer does; a program
            only when it logs it); without it ``final``, ``best`` and ``diff_acc`` say nothing
            and ``results.json`` leaves them out.
    """

    variant: str
    is_baseline: bool
    runs: int
    finished: int
    failed: int
    incomplete: int
    final: Interval
    best: Interval
    rule: DecisionRule
    final_ema: Interval | None = None
    best_ema: Interval | None = None
    decided: Interval | None = None
    diff: Paired | None = None
    diff_acc: Paired | None = None
    diff_ema: Paired | None = None
    decision: Decision | None = None
    p_adjusted: float | None = None
    iqm: Robust | None = None
    p_improve: Robust | None = None
    seeds_used: int | None = None
    seeds_max: int | None = None
    epoch_time: float | None = None
    time_ratio: float | None = None
    time_with_first: bool = False
    #: what ``epoch_time`` is the median of: ``"epoch"``, or ``"run"`` (runs that record no
    #: time per epoch: a program's)
    time_unit: str = "epoch"
    failures: list[tuple[str, str]] = field(default_factory=list)
    records_acc: bool = True

    @property
    def metric(self) -> str:
        """The decision metric's name (``decide_on``)."""
        return self.rule.metric.name

    @property
    def alpha(self) -> float:
        """The family-wise error rate of the verdicts."""
        return self.rule.alpha

    @property
    def verdict(self) -> str:
        """``"baseline"``; an adaptive design's verdict (``better``, ``worse``,
        ``equivalent``, ``inconclusive``, ``dropped: behind X``, ``open``); for a fixed design
        ``better`` / ``worse`` when Holm's adjusted p is below ``alpha``, ``no clear
        difference`` or ``too few seeds``; ``""`` without a baseline."""
        if self.is_baseline:
            return "baseline"
        if self.decision is not None:
            d = self.decision
            return f"dropped: behind {d.behind}" if d.behind else d.verdict
        if self.diff is None:
            return ""
        return fixed_verdict(self.diff, self.p_adjusted, self.rule)

    @property
    def digits(self) -> int:
        """Digits shown of the decision metric: 2 in percent, 3 for a loss in nats (a
        program's metric: as its interval supports, :meth:`shown_digits`)."""
        return self.rule.metric.digits

    def shown_digits(self, low: float | None, high: float | None, value: float | None) -> int:
        """Digits shown of a value of the decision metric in display units with its
        interval ``[low, high]`` (:meth:`~plugdrop.ablate.config.Metric.shown_digits`)."""
        spread = None if low is None or high is None else (high - low) / 2
        return self.rule.metric.shown_digits(spread, value)

    def cell(self, iv: Interval | Robust | None) -> str:
        """An interval of the decision metric (its final value's, its IQM's) as a table cell
        in display units, to the digits it supports: ``"0.490 [0.441, 0.539]"`` or ``"-"``."""
        if iv is None:
            return "-"
        scale = self.rule.metric.scale
        value = iv.mean if isinstance(iv, Interval) else iv.value
        return iv.format(scale, self.shown_digits(
            None if iv.low is None else iv.low * scale,
            None if iv.high is None else iv.high * scale, value * scale))

    def versus(self) -> tuple[float, float | None, float | None] | None:
        """``(mean, low, high)`` of the decision metric minus the baseline's, in display units
        (percentage points for accuracies): the adaptive design's interval (the one that agrees
        with its verdict), or the fixed design's t-interval; ``None`` with nothing to compare."""
        scale = self.rule.metric.scale
        d = self.decision
        if d is not None and d.mean is not None:
            return d.shown()  # type: ignore[return-value]
        if self.diff is not None and self.diff.n:
            return (self.diff.mean * scale,
                    None if self.diff.low is None else self.diff.low * scale,
                    None if self.diff.high is None else self.diff.high * scale)
        return None

    def format_p(self) -> str:
        """The adjusted p-value as a table cell: ``"0.023"``, ``"<0.001"`` or ``"-"``."""
        return p_cell(self.p_adjusted)

    def format_versus(self) -> str:
        """:meth:`versus` as a table cell: ``"+1.20 [-0.40, +2.80]"`` or ``"-"``."""
        v = self.versus()
        if v is None:
            return "-"
        mean, low, high = v
        digits = self.shown_digits(low, high, mean)
        num = lambda x: format(round(x, digits) or 0.0, f"+.{digits}f")  # noqa: E731
        return num(mean) if low is None or high is None else \
            f"{num(mean)} [{num(low)}, {num(high)}]"

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able fields, the statistics included. The decision metric's final value
        is ``final_metric``, and for a metric a program logs also ``final_<its name>``; the
        accuracies (``final_acc``, ``best_acc``, their EMA and differences) only when the runs
        record ``val_acc`` (else ``left_out`` says so); the time is ``epoch_time`` (seconds
        per epoch) or, of runs that record no epochs (a program's), ``run_time`` (seconds per
        finished run)."""

        def opt(x: Any) -> dict[str, object] | None:
            return x.as_dict() if x is not None else None

        acc: dict[str, Any] = {
            "final_acc": self.final.as_dict(), "best_acc": self.best.as_dict(),
            "final_acc_ema": opt(self.final_ema), "best_acc_ema": opt(self.best_ema)}
        diff_acc: dict[str, Any] = {"diff_final_acc": opt(self.diff_acc),
                                    "diff_final_acc_ema": opt(self.diff_ema)}
        if not self.records_acc:
            acc = {"left_out": "final_acc, best_acc and their differences: the runs log no "
                               "val_acc"}
            diff_acc = {}
        own = {f"final_{self.metric}": opt(self.decided)} if self.rule.metric.custom else {}
        time: dict[str, Any] = (
            {"epoch_time": self.epoch_time, "time_vs_baseline": self.time_ratio,
             "epoch_time_includes_first_epoch": self.time_with_first}
            if self.time_unit == "epoch" else
            {"run_time": self.epoch_time, "time_vs_baseline": self.time_ratio})
        return {"variant": self.variant, "baseline": self.is_baseline, "runs": self.runs,
                "finished": self.finished, "failed": self.failed,
                "incomplete": self.incomplete, **acc, "decide_on": self.metric,
                "final_metric": opt(self.decided), **own, "diff": opt(self.diff),
                **diff_acc, "verdict": self.verdict,
                "p_adjusted": self.p_adjusted, "decision": opt(self.decision),
                "seeds_used": self.seeds_used, "seeds_max": self.seeds_max,
                "iqm": opt(self.iqm), "probability_of_improvement": opt(self.p_improve),
                **time, "failures": [{"id": i, "error": e} for i, e in self.failures]}


def _by_seed(runs: Iterable[Run], pick: str, key: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for r in runs:
        v = r.final(key) if pick == "final" else r.best(key)
        if v is not None and not math.isnan(v):
            out[r.seed] = v
    return out


def _run_time(runs: Sequence[Run]) -> tuple[float | None, bool]:
    """Runs that record no time per epoch (a program's): the median wall time of a finished
    run's last attempt (``epoch_time`` holds it)."""
    times = [t for r in runs if r.status == FINISHED and r.done is not None
             if (t := number(r.done.get("wall_time"))) is not None and math.isfinite(t)]
    return (statistics.median(times) if times else None), False


def _epoch_time(runs: Sequence[Run]) -> tuple[float | None, bool]:
    """Median epoch time without each run's first epoch, and whether it had to include it."""
    def times(start: int) -> list[float]:
        return [t for r in runs for m in r.metrics[start:]
                if (t := number(m.get("epoch_time"))) is not None and math.isfinite(t)]

    later = times(1)
    if later:
        return statistics.median(later), False
    first = times(0)
    return (statistics.median(first), True) if first else (None, False)




def summarize(ab: Ablation, confidence: float = 0.95) -> list[VariantSummary]:
    """Per variant (config order): run counts, final and best validation accuracy over the
    finished seeds with confidence intervals (and for EMA when recorded), the decision metric's
    difference to the baseline paired by seed with its interval, adjusted p-value and verdict,
    robust summaries, and the time per epoch relative to the baseline (median, first epochs
    left out).

    Args:
        ab: from :func:`load_ablation`.
        confidence: confidence level of the per-variant intervals (default 0.95).
    """
    rule = ab.config.decision
    metric, higher = rule.metric.name, rule.higher_is_better
    design = design_of(ab.config, legacy_design(ab.out))
    replay: Replay | None = (design.replay(decision_values(ab, metric))
                             if design is not None else None)
    by_variant = {v: [r for r in ab.runs if r.variant == v] for v in ab.variants}
    if replay is not None:  # the runs the design never needed are not runs of the ablation
        by_variant = {v: rs[:replay.seeds_used(v)] for v, rs in by_variant.items()}
    base_runs = by_variant.get(ab.baseline or "", [])
    base_fin = [r for r in base_runs if r.status == FINISHED]
    base_metric = _by_seed(base_fin, "final", metric)
    base_acc = _by_seed(base_fin, "final", "val_acc")
    base_final_ema = _by_seed(base_fin, "final", "val_acc_ema")
    # the runs' records say how long they took: per epoch (plugdrop's trainer), else per run
    per_epoch = "epochs" in ab.sections
    timed = _epoch_time if per_epoch else _run_time
    records_acc = per_epoch or any("val_acc" in m for r in ab.runs for m in r.metrics)
    base_time, _ = timed([r for r in base_runs if r.status != FAILED])
    out = []
    for v, runs in by_variant.items():
        fin = [r for r in runs if r.status == FINISHED]
        final_ema = _by_seed(fin, "final", "val_acc_ema")
        values = _by_seed(fin, "final", metric)
        acc = _by_seed(fin, "final", "val_acc")
        has_ema = any("val_acc_ema" in m for r in runs for m in r.metrics)
        is_base = ab.baseline is not None and v == ab.baseline
        compare = ab.baseline in by_variant and not is_base
        t, with_first = timed([r for r in runs if r.status != FAILED])
        iqm, p_improve = robust(list(values.values()),
                                list(base_metric.values()) if compare else None, higher)
        decision = replay.decisions.get(v) if replay is not None and not is_base else None
        out.append(VariantSummary(
            variant=v, is_baseline=is_base, runs=len(runs), finished=len(fin),
            failed=sum(r.status == FAILED for r in runs),
            incomplete=sum(r.status == INCOMPLETE for r in runs),
            final=mean_ci(list(acc.values()), confidence, ACC),
            best=mean_ci(list(_by_seed(fin, "best", "val_acc").values()), confidence, ACC),
            rule=rule,
            final_ema=mean_ci(list(final_ema.values()), confidence, ACC) if has_ema else None,
            best_ema=(mean_ci(list(_by_seed(fin, "best", "val_acc_ema").values()), confidence,
                              ACC) if has_ema else None),
            decided=mean_ci(list(values.values()), confidence),
            diff=(paired_difference(values, base_metric, confidence, higher) if compare
                  else None),
            diff_acc=paired_difference(acc, base_acc, confidence) if compare else None,
            diff_ema=(paired_difference(final_ema, base_final_ema, confidence)
                      if compare and has_ema and base_final_ema else None),
            decision=decision,
            p_adjusted=decision.p if decision is not None else None,
            iqm=iqm, p_improve=p_improve,
            seeds_used=replay.seeds_used(v) if replay is not None else None,
            seeds_max=design.plan.max if design is not None else None,
            epoch_time=t, time_ratio=t / base_time if t is not None and base_time else None,
            time_with_first=with_first, time_unit="epoch" if per_epoch else "run",
            failures=[(r.id, failure(r)) for r in runs if r.status == FAILED],
            records_acc=records_acc))
    if replay is None:  # a fixed design: Holm over the variants
        others = [s for s in out if s.diff is not None]
        for s, p in zip(others, holm([s.diff.p for s in others])):  # type: ignore[union-attr]
            s.p_adjusted = p
    return out


def saved_runs(summary: Sequence[VariantSummary]) -> tuple[int, int] | None:
    """An adaptive design's ``(runs it used, runs of the fixed design with max seeds)``."""
    if not summary or summary[0].seeds_max is None:
        return None
    used = sum(s.seeds_used or 0 for s in summary)
    return used, len(summary) * summary[0].seeds_max


def run_counts(ab: Ablation, summary: Sequence[VariantSummary]) -> dict[str, int]:
    """Finished, failed and incomplete runs: of the folder, or of an adaptive design the runs
    it gave each variant (those it never needed are no runs of the ablation)."""
    if summary and summary[0].seeds_max is not None:
        return {FINISHED: sum(s.finished for s in summary),
                FAILED: sum(s.failed for s in summary),
                INCOMPLETE: sum(s.incomplete for s in summary)}
    return {k: ab.count(k) for k in (FINISHED, FAILED, INCOMPLETE)}


def failure(r: Run) -> str:
    where = f" in epoch {r.failed_epoch}" if r.failed_epoch is not None else ""
    kind = f"{r.error_type}: " if r.error_type else ""
    return f"failed{where}: {kind}{r.error}"


def open_verdict(s: VariantSummary) -> bool:
    """Whether an adaptive design still trains this variant."""
    return s.decision is not None and s.decision.verdict == OPEN


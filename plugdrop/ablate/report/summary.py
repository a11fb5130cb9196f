"""What a variant's runs say, with statistics over seeds: :func:`summarize`."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .read import FAILED, FINISHED, INCOMPLETE, Ablation, Run, number
from .stats import Interval, Paired, mean_ci, paired_difference

__all__ = ["ACC", "VariantSummary", "failure", "summarize"]

#: Accuracies live in [0, 1]: their intervals are cut to it (no "104%").
ACC = (0.0, 1.0)


@dataclass
class VariantSummary:
    """What a variant's runs say, with the statistics over seeds.

    Attributes:
        variant: its name.
        is_baseline: whether it is the ablation's baseline.
        runs, finished, failed, incomplete: how many runs, by status.
        final, best: final / best validation accuracy over the finished seeds (mean and CI).
        final_ema, best_ema: the same for the EMA weights, ``None`` without EMA.
        diff: final accuracy minus the baseline's, paired by seed; ``None`` for the baseline
            itself or without a baseline.
        diff_ema: the same for the EMA accuracy.
        epoch_time: median seconds per epoch, each run's first epoch left out (warm-up).
        time_ratio: ``epoch_time`` over the baseline's.
        time_with_first: whether the runs had only a first epoch, so ``epoch_time`` includes it.
        failures: ``(run id, one-line error)`` of each failed run.
    """

    variant: str
    is_baseline: bool
    runs: int
    finished: int
    failed: int
    incomplete: int
    final: Interval
    best: Interval
    final_ema: Interval | None = None
    best_ema: Interval | None = None
    diff: Paired | None = None
    diff_ema: Paired | None = None
    epoch_time: float | None = None
    time_ratio: float | None = None
    time_with_first: bool = False
    failures: list[tuple[str, str]] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """``"baseline"``, the paired comparison's verdict, or ``""`` without a baseline."""
        if self.is_baseline:
            return "baseline"
        return self.diff.verdict if self.diff is not None else ""

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able fields, the statistics included."""

        def opt(x: Interval | Paired | None) -> dict[str, object] | None:
            return x.as_dict() if x is not None else None

        return {"variant": self.variant, "baseline": self.is_baseline, "runs": self.runs,
                "finished": self.finished, "failed": self.failed,
                "incomplete": self.incomplete, "final_acc": self.final.as_dict(),
                "best_acc": self.best.as_dict(), "final_acc_ema": opt(self.final_ema),
                "best_acc_ema": opt(self.best_ema), "diff_final_acc": opt(self.diff),
                "diff_final_acc_ema": opt(self.diff_ema), "verdict": self.verdict,
                "epoch_time": self.epoch_time, "time_vs_baseline": self.time_ratio,
                "epoch_time_includes_first_epoch": self.time_with_first,
                "failures": [{"id": i, "error": e} for i, e in self.failures]}


def _by_seed(runs: Iterable[Run], pick: str, key: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for r in runs:
        v = r.final(key) if pick == "final" else r.best(key)
        if v is not None and not math.isnan(v):
            out[r.seed] = v
    return out


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
    finished seeds with confidence intervals (and for EMA when recorded), the difference of the
    final accuracy to the baseline paired by seed with its interval, p-value and verdict, and
    the time per epoch relative to the baseline (median, first epochs left out).

    Args:
        ab: from :func:`load_ablation`.
        confidence: confidence level of every interval and of the verdicts (default 0.95).
    """
    def measured(runs: list[Run]) -> list[Run]:
        return [r for r in runs if r.status != FAILED]

    by_variant = {v: [r for r in ab.runs if r.variant == v] for v in ab.variants}
    base_runs = by_variant.get(ab.baseline or "", [])
    base_fin = [r for r in base_runs if r.status == FINISHED]
    base_final = _by_seed(base_fin, "final", "val_acc")
    base_final_ema = _by_seed(base_fin, "final", "val_acc_ema")
    base_time, _ = _epoch_time(measured(base_runs))
    out = []
    for v, runs in by_variant.items():
        fin = [r for r in runs if r.status == FINISHED]
        final = _by_seed(fin, "final", "val_acc")
        final_ema = _by_seed(fin, "final", "val_acc_ema")
        has_ema = any("val_acc_ema" in m for r in runs for m in r.metrics)
        is_base = ab.baseline is not None and v == ab.baseline
        compare = ab.baseline in by_variant and not is_base
        t, with_first = _epoch_time(measured(runs))
        out.append(VariantSummary(
            variant=v, is_baseline=is_base, runs=len(runs), finished=len(fin),
            failed=sum(r.status == FAILED for r in runs),
            incomplete=sum(r.status == INCOMPLETE for r in runs),
            final=mean_ci(list(final.values()), confidence, ACC),
            best=mean_ci(list(_by_seed(fin, "best", "val_acc").values()), confidence, ACC),
            final_ema=mean_ci(list(final_ema.values()), confidence, ACC) if has_ema else None,
            best_ema=(mean_ci(list(_by_seed(fin, "best", "val_acc_ema").values()), confidence,
                              ACC)
                      if has_ema else None),
            diff=paired_difference(final, base_final, confidence) if compare else None,
            diff_ema=(paired_difference(final_ema, base_final_ema, confidence)
                      if compare and has_ema and base_final_ema else None),
            epoch_time=t,
            time_ratio=t / base_time if t is not None and base_time else None,
            time_with_first=with_first,
            failures=[(r.id, failure(r)) for r in runs if r.status == FAILED]))
    return out


def failure(r: Run) -> str:
    where = f" in epoch {r.failed_epoch}" if r.failed_epoch is not None else ""
    kind = f"{r.error_type}: " if r.error_type else ""
    return f"failed{where}: {kind}{r.error}"

"""The summary of an ablation as fixed-width text: :func:`table`."""

from __future__ import annotations

from collections.abc import Sequence

from .read import FAILED, FINISHED, INCOMPLETE, Ablation
from .summary import VariantSummary, failure

__all__ = ["table"]


def _format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Fixed-width columns, left-aligned, with a rule under the header."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
            for r in [header, ["-" * w for w in widths], *rows]]


def _runs_cell(s: VariantSummary) -> str:
    cell = f"{s.finished}/{s.runs}"
    extra = [f"{n} {what}" for n, what in ((s.failed, "failed"), (s.incomplete, "incomplete"))
             if n]
    return cell + (f" ({', '.join(extra)})" if extra else "")


def _time_cell(s: VariantSummary, baseline: bool) -> str:
    if s.epoch_time is None:
        return "-"
    mark = "*" if s.time_with_first else ""
    secs = f"{s.epoch_time:.2f}s{mark}"
    if baseline and s.time_ratio is not None:
        return f"{s.time_ratio:.2f}x ({secs})"
    return secs


def table(ab: Ablation, summary: Sequence[VariantSummary]) -> str:
    """The summary as fixed-width text: one row per variant, a legend, the failed and
    incomplete runs, and the warnings of :func:`load_ablation`.

    Args:
        ab: from :func:`load_ablation`.
        summary: from :func:`summarize` on ``ab``.
    """
    has_base = ab.baseline is not None and any(s.is_baseline for s in summary)
    has_ema = any(s.final_ema is not None for s in summary)
    conf = round(100 * summary[0].final.confidence) if summary else 95
    header = ["variant", "runs done", "final val acc %", "best val acc %"]
    if has_ema:
        header.append("final EMA acc %")
    if has_base:
        header += [f"vs {ab.baseline} (pp)", "p", "verdict"]
    header.append("time/epoch" + (" vs baseline" if has_base else ""))
    rows = []
    for s in summary:
        row = [s.variant, _runs_cell(s), s.final.format(), s.best.format()]
        if has_ema:
            row.append(s.final_ema.format() if s.final_ema is not None else "-")
        if has_base:
            if s.is_baseline:
                row += ["(baseline)", "", ""]
            elif s.diff is not None:
                row += [s.diff.format(), s.diff.format_p(), s.diff.verdict]
            else:
                row += ["-", "-", ""]
        row.append(_time_cell(s, has_base))
        rows.append(row)
    n = len(ab.runs)
    lines = [f"{ab.out}: {n} runs: {ab.count(FINISHED)} finished, {ab.count(FAILED)} failed, "
             f"{ab.count(INCOMPLETE)} incomplete", ""]
    lines += _format_table(header, rows)
    lines += ["", f"final/best val acc: mean over the finished seeds [{conf}% confidence "
                  "interval, t-distribution]; one seed has no interval."]
    if has_base:
        lines += [f"vs {ab.baseline}: final val acc minus the baseline's, per seed that both "
                  f"finished, mean [{conf}% CI] in percentage points;",
                  "p: paired t-test (scipy.stats.ttest_rel). verdict: better/worse when "
                  f"p < {1 - conf / 100:.2g}; with fewer than 3 common seeds: too few seeds "
                  "to conclude."]
    lines.append("time/epoch: median epoch time, each run's first epoch (warm-up) left out"
                 + ("; relative to the baseline." if has_base else "."))
    if any(s.time_with_first for s in summary):
        lines.append("*: the runs have only one epoch so far: the time includes the warm-up.")
    failed = [(r.id, failure(r)) for r in ab.runs if r.status == FAILED]
    if failed:
        lines += ["", "Failed runs:"] + [f"  {i}: {e}" for i, e in failed]
    incomplete = [r for r in ab.runs if r.status == INCOMPLETE]
    if incomplete:
        lines += ["", "Incomplete runs (running, stopped or not started): " + ", ".join(
            f"{r.id} ({len(r.metrics)} epochs)" if r.started else f"{r.id} (not started)"
            for r in incomplete)]
    if ab.warnings:
        lines += [""] + [f"warning: {w}" for w in ab.warnings]
    return "\n".join(lines)

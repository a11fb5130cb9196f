"""The summary of an ablation as fixed-width text: :func:`table`."""

from __future__ import annotations

from collections.abc import Sequence

from . import logged
from ..results import FAILED, FINISHED, INCOMPLETE, Ablation
from .notes import legend, notes
from .summary import VariantSummary, failure, open_verdict, run_counts, saved_runs

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


def _seeds_cell(s: VariantSummary) -> str:
    if s.seeds_max is None:
        return _runs_cell(s)
    return _runs_cell(s) + f" of {s.seeds_max}"


def _diff_cell(s: VariantSummary) -> tuple[str, str]:
    """(difference to the baseline with its interval, adjusted p) in display units."""
    return s.format_versus(), s.format_p()


def table(ab: Ablation, summary: Sequence[VariantSummary]) -> str:
    """The summary as fixed-width text: one row per variant, a legend that says how the
    verdicts control their error, the robust summaries, the runs an adaptive design saved,
    the failed and incomplete runs, and the warnings of :func:`load_ablation`.

    Args:
        ab: from :func:`load_ablation`.
        summary: from :func:`summarize` on ``ab``.
    """
    has_base = ab.baseline is not None and any(s.is_baseline for s in summary)
    has_ema = any(s.final_ema is not None for s in summary)
    conf = round(100 * summary[0].final.confidence) if summary else 95
    rule = ab.config.decision
    metric, scale = rule.metric.name, rule.metric.scale
    unit = "pp" if rule.metric.percent else ""
    adaptive = bool(summary) and summary[0].seeds_max is not None
    shown = metric.replace("_", " ") + (" %" if scale == 100.0 else "")
    program = ab.config.program is not None  # its own metrics: no accuracy columns of ours
    per = "run" if program else "epoch"
    header = ["variant", "seeds done" if adaptive else "runs done"] + (
        [] if program else ["final val acc %", "best val acc %"])
    if has_ema and not program:
        header.append("final EMA acc %")
    if metric != "val_acc" or program:
        header.append(f"final {shown}")
    if has_base:
        header += [f"vs {ab.baseline}" + (f" ({unit})" if unit else ""), "p adj.", "verdict"]
    header.append(f"time/{per}" + (" vs baseline" if has_base else ""))
    rows = []
    for s in summary:
        row = [s.variant, _seeds_cell(s)] + ([] if program else [s.final.format(),
                                                                 s.best.format()])
        if has_ema and not program:
            row.append(s.final_ema.format() if s.final_ema is not None else "-")
        if metric != "val_acc" or program:
            row.append(s.decided.format(scale, s.digits) if s.decided is not None else "-")
        if has_base:
            row += ["(baseline)", "", ""] if s.is_baseline else [*_diff_cell(s), s.verdict]
        row.append(_time_cell(s, has_base))
        rows.append(row)
    c = run_counts(ab, summary)
    lines = [f"{ab.out}: {sum(c.values())} runs: {c[FINISHED]} finished, {c[FAILED]} failed, "
             f"{c[INCOMPLETE]} incomplete", ""]
    lines += _format_table(header, rows)
    lines += ["", f"final {metric}: each run's last logged value, mean over the finished seeds "
                  f"[{conf}% confidence interval, t-distribution]; one seed has no interval."
              if program else f"final/best val acc: mean over the finished seeds [{conf}% "
                              "confidence interval, t-distribution]; one seed has no interval."]
    if has_base:
        lines += _legend(ab, summary, unit, adaptive)
    lines.append(("time/run: median wall time of a finished run (its last attempt)" if program
                  else "time/epoch: median epoch time, each run's first epoch (warm-up) left "
                       "out") + ("; relative to the baseline." if has_base else "."))
    if any(s.time_with_first for s in summary):
        lines.append("*: the runs have only one epoch so far: the time includes the warm-up.")
    lines += _robust_lines(summary, shown, scale, has_base)
    if program:
        lines += logged.text_lines(ab, conf / 100)
    saved = saved_runs(summary)
    if saved is not None:
        used, fixed = saved
        still = any(open_verdict(s) for s in summary)
        lines += ["", f"The adaptive design {'has trained' if still else 'trained'} {used} "
                      f"runs{' so far' if still else ''}; a fixed design with "
                      f"{summary[0].seeds_max} seeds per variant trains {fixed}: "
                      f"{fixed - used} runs saved."]
        lines += [""] + design_notes if (design_notes := notes(summary)) else []
    failed = [(r.id, failure(r)) for r in ab.runs if r.status == FAILED]
    if failed:
        lines += ["", "Failed runs:"] + [f"  {i}: {e}" for i, e in failed]
    incomplete = [r for r in ab.runs if r.status == INCOMPLETE and
                  (not adaptive or r.started)]
    if incomplete:
        lines += ["", "Incomplete runs (running, stopped or not started): " + ", ".join(
            f"{r.id} ({len(r.metrics)} {'records' if program else 'epochs'})" if r.started
            else f"{r.id} (not started)"
            for r in incomplete)]
    if ab.warnings:
        lines += [""] + [f"warning: {w}" for w in ab.warnings]
    return "\n".join(lines)


def _legend(ab: Ablation, summary: Sequence[VariantSummary], unit: str, adaptive: bool
            ) -> list[str]:
    if adaptive:  # the procedure that ran: the exact design, or a legacy folder's
        return legend(summary, ab.baseline, unit)
    rule = ab.config.decision
    alpha, metric = rule.alpha, rule.metric.name
    m = sum(not s.is_baseline for s in summary)
    what = f"final {metric} minus the baseline's" + (f", in {unit}" if unit else "")
    return [f"vs {ab.baseline}: {what}, per seed that both finished, mean [{round(100 * summary[0].final.confidence)}% CI].",
            f"p adj.: paired t-test (scipy.stats.ttest_rel), Holm-adjusted over the {m} "
            f"variants. verdict: better/worse when p adj. < {alpha:g} (family-wise); with "
            f"fewer than 3 common seeds: too few seeds to conclude."]


def _robust_lines(summary: Sequence[VariantSummary], shown: str, scale: float,
                  has_base: bool) -> list[str]:
    rows = [[s.variant, s.iqm.format(scale, s.digits) if s.iqm is not None else "-",
             s.p_improve.format(1.0) if s.p_improve is not None else "-"] for s in summary
            if s.iqm is not None and s.iqm.n]
    if not rows:
        return []
    header = ["variant", f"IQM of final {shown}"]
    if has_base:
        header.append("P(beats baseline)")
    else:
        rows = [r[:2] for r in rows]
    return ["", "Robust summaries (rliable's method: interquartile mean and the probability "
                "that a seed beats a baseline seed, stratified bootstrap 95% CI):"] + \
        _format_table(header, rows)

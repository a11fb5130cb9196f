"""The summary of an ablation as fixed-width text: :func:`table`."""

from __future__ import annotations

from collections.abc import Sequence

from ..results import FAILED, FINISHED, INCOMPLETE, Ablation
from .cells import format_table, seeds_cell, time_cell
from .notes import notes, savings
from .sections import Facts, facts
from .shown import rest_line
from .summary import VariantSummary, failure, run_counts

__all__ = ["LISTED", "table"]

#: the failed runs, incomplete runs and warnings a table lists (the rest are counted)
LISTED = 20


def table(ab: Ablation, summary: Sequence[VariantSummary], f: Facts | None = None) -> str:
    """The summary as fixed-width text: one row per variant (of many, those
    :func:`~.shown.pick` chooses, the rest in one line), the columns and lines of the report's
    sections that apply (:mod:`.sections`: the legend of the verdicts, the robust summaries,
    what a program logged, ...), the runs an adaptive design saved, the failed and incomplete
    runs (the first :data:`LISTED` of each), and the warnings of :func:`load_ablation`.

    Args:
        ab: from :func:`load_ablation`.
        summary: from :func:`summarize` on ``ab``.
        f: the sections' facts, when made already (:func:`~.sections.facts`).
    """
    f = f or facts(ab, summary)
    has_base = ab.baseline is not None and any(s.is_baseline for s in summary)
    rule = ab.config.decision
    metric, scale = rule.metric.name, rule.metric.scale
    unit = rule.metric.label
    adaptive = bool(summary) and summary[0].seeds_max is not None
    shown = metric.replace("_", " ") + (" %" if scale == 100.0 else
                                        f" ({unit})" if unit else "")
    per = summary[0].time_unit if summary else "run"
    columns = [c for s in f.sections for c in s.columns(f, page=False)]
    if not any(s.shows_metric == metric for s in f.sections):
        columns.append((f"final {shown}", lambda s: s.cell(s.decided)))
    header = ["variant", "seeds done" if adaptive else "runs done", *(h for h, _ in columns)]
    if has_base:
        header += [f"vs {ab.baseline}" + (f" ({unit})" if unit else ""), "p adj.", "verdict"]
    header.append(f"time/{per}" + (" vs baseline" if has_base else ""))
    rows = []
    for s in f.shown:
        row = [s.variant, seeds_cell(s), *(cell(s) for _, cell in columns)]
        if has_base:
            row += (["(baseline)", "", ""] if s.is_baseline else
                    [s.format_versus(), s.format_p(), s.verdict])
        row.append(time_cell(s, has_base))
        rows.append(row)
    c = run_counts(ab, summary)
    lines = [f"{ab.out}: {sum(c.values())} runs: {c[FINISHED]} finished, {c[FAILED]} failed, "
             f"{c[INCOMPLETE]} incomplete", ""]
    lines += format_table(header, rows)
    if (more := rest_line(f.rest)) is not None:
        lines.append(more)
    lines.append("")
    for section in f.sections:
        lines += section.note(f)
    for section in f.sections:
        lines += section.text(f)
    saved = savings(summary, c[FINISHED])
    if saved is not None:
        lines += ["", saved]
        lines += [""] + design_notes if (design_notes := notes(summary)) else []
    lines += _runs_lines(ab, adaptive)
    return "\n".join(lines)


def _runs_lines(ab: Ablation, adaptive: bool) -> list[str]:
    """The failed and incomplete runs, and the warnings, each list cut after :data:`LISTED`."""
    lines: list[str] = []
    failed = [(r.id, failure(r)) for r in ab.runs if r.status == FAILED]
    if failed:
        lines += ["", "Failed runs:"] + [f"  {i}: {e}" for i, e in failed[:LISTED]]
        lines += _more(len(failed), "failed runs", "results.json")
    incomplete = [r for r in ab.runs if r.status == INCOMPLETE and
                  (not adaptive or r.started)]
    if incomplete:
        what = "epochs" if "epochs" in ab.sections else "records"
        lines += ["", "Incomplete runs (running, stopped or not started): " + ", ".join(
            f"{r.id} ({len(r.metrics)} {what})" if r.started else f"{r.id} (not started)"
            for r in incomplete[:LISTED])]
        lines += _more(len(incomplete), "incomplete runs", "results.json")
    if ab.warnings:
        lines += [""] + [f"warning: {w}" for w in ab.warnings[:LISTED]]
        lines += _more(len(ab.warnings), "warnings", "results.json")
    return lines


def _more(n: int, what: str, where: str) -> list[str]:
    """The line for what a list leaves out after its first :data:`LISTED`."""
    return [f"  ... and {n - LISTED} more {what} (all in {where})"] if n > LISTED else []

"""What the table (:mod:`.table`) and the page (:mod:`.html`) say about an adaptive design's
decisions besides the verdicts: the legend of the procedure that ran (:func:`legend`), the
runs it trained against a fixed design's (:func:`savings`), and the notes (:func:`notes`):
for each variant left inconclusive or open, about how many seeds an effect of the size
observed would need, and the warnings about skewed differences."""

from __future__ import annotations

from collections.abc import Sequence

from ..decide.decision import INCONCLUSIVE, OPEN, Decision
from ..decide.legacy import PROCEDURE as LEGACY
from .summary import VariantSummary, open_verdict, saved_runs

__all__ = ["legend", "notes", "procedure", "savings"]


def procedure(summary: Sequence[VariantSummary]) -> str | None:
    """The procedure that decided the adaptive design's verdicts (``None``: a fixed design)."""
    return next((s.decision.procedure for s in summary
                 if s.decision is not None and s.decision.procedure), None)


def legend(summary: Sequence[VariantSummary], baseline: str | None, unit: str) -> list[str]:
    """The legend of an adaptive design's columns: what the interval is, the procedure, what
    ``p adj.`` and each verdict mean."""
    rule = summary[0].rule
    alpha, margin, metric, higher = rule.alpha, rule.margin, rule.metric.name, \
        rule.higher_is_better
    m = sum(not s.is_baseline for s in summary)
    what = f"final {metric} minus the baseline's" + (f", in {unit}" if unit else "")
    side = "above/below 0" if higher else f"below/above 0 (lower {metric} is better)"
    ran = procedure(summary)
    if ran == LEGACY:
        return [f"vs {baseline}: {what}, per seed; mean [confidence sequence: alpha "
                f"{alpha:g} split over the {m} variants and spent over the rounds "
                f"(Pocock-type), valid however often it was looked at].",
                f"p adj.: the smallest family-wise level at which a look would have called "
                f"it better or worse. verdict: better/worse when the interval lies {side}, "
                f"equivalent within +-{margin:g}, dropped behind the best of its grid, "
                f"inconclusive at the maximum seeds; open: more seeds to come.",
                f"procedure: {LEGACY}."]
    return [f"vs {baseline}: {what}, per seed; mean [interval at the variant's share of alpha "
            f"at its last look: exact group-sequential t boundaries, valid however often it "
            f"was looked at].",
            f"procedure: {ran or 'not looked at yet'}; better/worse verdicts hold at "
            f"{alpha:g} family-wise over the {m} variants and every round.",
            f"p adj.: the smallest family-wise level at which the design would have called it "
            f"better or worse. verdict: better/worse when the interval lies {side}, "
            f"equivalent when the interval of its two one-sided tests (at its own share of "
            f"alpha) lies within +-{margin:g}, dropped behind the best of its grid, "
            f"inconclusive at the maximum seeds; open: more seeds to come."]


def savings(summary: Sequence[VariantSummary], finished: int) -> str | None:
    """The runs an adaptive design trained against a fixed design with its maximum seeds
    (``None``: a fixed design). While a variant is still open (the design runs, or was
    stopped), ``finished`` (the runs that finished, as the folder says) of those it asked for
    so far, and at most how many it saves."""
    saved = saved_runs(summary)
    if saved is None:
        return None
    used, fixed = saved
    most = summary[0].seeds_max
    if any(open_verdict(s) for s in summary):
        return (f"The adaptive design has finished {finished} of the {used} runs it asked for "
                f"so far; a fixed design with {most} seeds per variant trains {fixed}: at most "
                f"{fixed - used} runs saved.")
    return (f"The adaptive design trained {used} runs; a fixed design with {most} seeds per "
            f"variant trains {fixed}: {fixed - used} runs saved.")


def notes(summary: Sequence[VariantSummary]) -> list[str]:
    """The forecast of each variant left inconclusive or open, and the skewness warnings
    (one line each; none when there is nothing to say)."""
    out: list[str] = []
    decided = [(s, s.decision) for s in summary if s.decision is not None]
    for s, d in decided:
        line = _forecast(s, d)
        if line:
            out.append(line)
    for s, d in decided:
        if d.skew_warning and d.skewness is not None:
            out.append(f"skewness: {s.variant}'s differences are skewed (G1 = {d.skewness:+.2f} "
                       f"over {d.n} seeds): its t-test may not keep its error rate.")
    pooled = next((d for _, d in decided if d.pooled_skew_warning), None)
    if pooled is not None and pooled.pooled_skewness is not None:
        out.append(f"skewness: the differences of all variants together are skewed (pooled G1 "
                   f"= {pooled.pooled_skewness:+.2f}): the t-boundaries may not keep alpha "
                   f"(skewed differences give more false verdicts than alpha allows; see the "
                   f"docs' Decisions).")
    return out


def _forecast(s: VariantSummary, d: Decision) -> str | None:
    if d.verdict not in (INCONCLUSIVE, OPEN) or d.n < 2 or not d.mean:
        return None
    mean, low, high = d.shown()
    mean = mean or 0.0
    digits = s.shown_digits(low, high, mean)
    unit = s.rule.metric.unit
    size = format(round(mean, digits) or 0.0, f"+.{digits}f") + (f" {unit}" if unit else "")
    state = "stays inconclusive" if d.verdict == INCONCLUSIVE else "is still open"
    need = (f"about {d.forecast} seeds" if d.forecast is not None
            else "more than 10,000 seeds")
    return (f"forecast: {s.variant} {state} at {d.n} seeds: a true difference of the size "
            f"observed ({size}) needs {need} to be called better or worse (80% power at its "
            f"share of alpha, as a fixed design; plugdrop plan --from OUT plans the adaptive "
            f"one).")

"""The verdicts: each variant against the baseline (the table's rows, their difference with
its interval, the adjusted p-value, the verdict and its reason), the legend of the procedure
that decided, the time per epoch or run, a forest plot of the differences and, for an
adaptive design, the seeds each variant used and the runs it saved."""

from __future__ import annotations

from ..figures import plot_forest, plot_seeds
from ..markup import e, img, table, verdict_class
from ...results import FINISHED
from ..notes import legend, notes, procedure, savings
from ..summary import VariantSummary, run_counts
from .base import Facts, Section

__all__ = ["Verdicts"]


def _unit(f: Facts) -> str:
    """The decision metric's unit as the headers name it (``pp``, a program's metric's own
    ``unit``, or ``""``)."""
    return f.ab.config.decision.metric.label


class Verdicts(Section):
    name = "verdicts"
    always = True

    def plots(self, f: Facts) -> list[tuple[str, bytes | None]]:
        return [("forest.png", plot_forest(f.shown, f.ab.baseline)),
                ("seeds.png", plot_seeds(f.shown))]

    def text(self, f: Facts) -> list[str]:
        ab, summary = f.ab, f.summary
        has_base = ab.baseline is not None and any(s.is_baseline for s in summary)
        adaptive = bool(summary) and summary[0].seeds_max is not None
        lines: list[str] = []
        if has_base:
            lines += _legend(f, adaptive)
        per = summary[0].time_unit if summary else "run"
        lines.append(("time/run: median wall time of a finished run (its last attempt)"
                      if per == "run" else
                      "time/epoch: median epoch time, each run's first epoch (warm-up) left "
                      "out") + ("; relative to the baseline." if has_base else "."))
        if any(s.time_with_first for s in summary):
            lines.append("*: the runs have only one epoch so far: the time includes the "
                         "warm-up.")
        return lines

    def html(self, f: Facts) -> list[str]:
        ab = f.ab
        rule = ab.config.decision
        unit = f" ({_unit(f)})" if _unit(f) else ""
        extra = [c for s in f.sections for c in s.columns(f, page=True)]
        head = ["variant", "seeds / runs done", *(h for h, _ in extra)]
        if not any(s.shows_metric == rule.metric.name for s in f.sections):
            extra.append((f"final {rule.metric.name}{unit}", lambda s: s.cell(s.decided)))
            head.append(extra[-1][0])
        head += [f"vs {ab.baseline}{unit}", "p adj.", "verdict", "reason"]

        def row(s: VariantSummary) -> str:
            seeds = f"{s.finished}/{s.runs}" + (f" of {s.seeds_max}" if s.seeds_max else "")
            diff, p = ("(baseline)", "(baseline)") if s.is_baseline else (
                s.format_versus(), s.format_p())
            reason = s.decision.reason if s.decision is not None else ""
            cells = [s.variant, seeds, *(cell(s) for _, cell in extra), diff, p, s.verdict,
                     reason]
            at = len(cells) - 2  # the verdict's column
            cls = verdict_class(s.verdict)
            return "<tr>" + "".join(
                f'<td class="{"num" if 1 <= i < at else (cls if i == at else "")}">{e(c)}</td>'
                for i, c in enumerate(cells)) + "</tr>"

        parts = ["<h2 id=\"verdicts\">Verdicts</h2>",
                 table(head, [row(s) for s in f.shown + f.rest], "verdicts", "variants",
                       fold_at=len(f.shown))]
        ran = procedure(f.summary)
        parts += [f"<p class=\"note\">{e(line)}</p>" for line in
                  ([f"Procedure: {ran}."] if ran else []) + notes(f.summary)]
        saved = savings(f.summary, run_counts(ab, f.summary)[FINISHED])
        if saved is not None:
            parts.append(f"<p>{e(saved)}</p>")
        for name, heading in (("forest.png", "Differences to the baseline"),
                              ("seeds.png", "Seeds used")):
            path = ab.out / name
            if path.is_file():
                parts += [f"<h2>{e(heading)}</h2>", img(path.read_bytes(), heading)]
        return parts


def _legend(f: Facts, adaptive: bool) -> list[str]:
    ab, summary = f.ab, f.summary
    if adaptive:  # the procedure that ran: the exact design, or a legacy folder's
        return legend(summary, ab.baseline, _unit(f))
    rule = ab.config.decision
    alpha, metric = rule.alpha, rule.metric.name
    m = sum(not s.is_baseline for s in summary)
    unit = _unit(f)
    what = f"final {metric} minus the baseline's" + (f", in {unit}" if unit else "")
    conf = round(100 * summary[0].final.confidence)
    return [f"vs {ab.baseline}: {what}, per seed that both finished, mean [{conf}% CI].",
            f"p adj.: paired t-test (scipy.stats.ttest_rel), Holm-adjusted over the {m} "
            f"variants. verdict: better/worse when p adj. < {alpha:g} (family-wise); with "
            f"fewer than 3 common seeds: too few seeds to conclude."]

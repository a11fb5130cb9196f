"""Robust summaries of the decision metric per variant (rliable's method): the interquartile
mean over seeds and the probability that a seed beats a baseline seed, each with a stratified
bootstrap interval (:mod:`..robust`)."""

from __future__ import annotations

from ..cells import format_table
from ..markup import e, table
from .base import Facts, Section

__all__ = ["Robust"]


class Robust(Section):
    name = "robust"
    always = True

    def text(self, f: Facts) -> list[str]:
        rule = f.ab.config.decision
        scale, unit = rule.metric.scale, rule.metric.label
        shown = rule.metric.name.replace("_", " ") + (" %" if scale == 100.0 else
                                                      f" ({unit})" if unit else "")
        has_base = f.ab.baseline is not None and any(s.is_baseline for s in f.summary)
        rows = [[s.variant, s.cell(s.iqm),
                 s.p_improve.format(1.0) if s.p_improve is not None else "-"]
                for s in f.shown if s.iqm is not None and s.iqm.n]
        if not rows:
            return []
        header = ["variant", f"IQM of final {shown}"]
        if has_base:
            header.append("P(beats baseline)")
        else:
            rows = [r[:2] for r in rows]
        return ["", "Robust summaries (rliable's method: interquartile mean and the probability "
                    "that a seed beats a baseline seed, stratified bootstrap 95% CI):"] + \
            format_table(header, rows)

    def html(self, f: Facts) -> list[str]:
        rule = f.ab.config.decision
        metric = rule.metric.name + (f" ({rule.metric.label})" if rule.metric.label else "")
        rows = [f"<tr><td>{e(s.variant)}</td><td class=\"num\">"
                f"{e(s.cell(s.iqm))}</td><td class=\"num\">"
                f"{e(s.p_improve.format(1.0) if s.p_improve else '-')}</td></tr>"
                for s in f.shown + f.rest]
        return ["<h2>Robust summaries</h2>",
                table(["variant", f"IQM of final {metric} [95% bootstrap CI]",
                       "P(a seed beats a baseline seed) [95% CI]"], rows, what="variants",
                      fold_at=len(f.shown))]

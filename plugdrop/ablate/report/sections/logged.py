"""What a ``program:`` logged, as it logged it: a learning curve per metric (``curves.png``),
the final values of every metric per variant, ``results.csv`` with a column per metric, and
``results.json``'s ``logged`` (:mod:`..logged`)."""

from __future__ import annotations

from typing import Any

from .. import logged
from ..markup import e, img, table
from ..shown import focus
from .base import Facts, Section

__all__ = ["Logged"]


class Logged(Section):
    name = "logged"

    def note(self, f: Facts) -> list[str]:
        conf = round(100 * f.confidence)
        metric = f.ab.config.decision.metric
        unit = f" in {metric.own_unit}" if metric.own_unit else ""
        return [f"final {metric.name}: each run's last logged value{unit}, mean over the "
                f"finished seeds [{conf}% confidence interval, t-distribution]; one seed has no "
                f"interval.",
                "digits: a logged metric is shown to the digits its interval supports (its "
                "half-width to 2 significant digits; without one, 4 significant digits)."]

    def text(self, f: Facts) -> list[str]:
        return logged.text_lines(f.ab, f.confidence, [s.variant for s in f.shown])

    def plots(self, f: Facts) -> list[tuple[str, bytes | None]]:
        return [("curves.png", logged.plot_curves(focus(f.ab, f.shown)))]

    def csv(self, f: Facts) -> bytes:
        return logged.csv_bytes(f.ab)

    def data(self, f: Facts) -> dict[str, Any]:
        return {"logged": {v: {m: iv.as_dict() for m, iv in row.items()}
                           for v, row in logged.final_values(f.ab, f.confidence).items()}}

    def html(self, f: Facts) -> list[str]:
        names = logged.metrics_of(f.ab)
        parts = ["<h2>Learning curves</h2>"]
        curves = f.out / "curves.png"
        if curves.is_file():
            parts.append(img(curves.read_bytes(), "learning curves"))
            more = len(names) - logged.MOST_CURVES
            if more > 0:
                parts.append(f'<p class="note">{more} more metrics are in results.csv and '
                             f'results.json.</p>')
        else:
            parts.append('<p class="note">No curve yet: no run has logged a metric.</p>')
        if names:
            values = logged.final_values(f.ab, f.confidence)
            rows = [f"<tr><td>{e(s.variant)}</td>" + "".join(
                f'<td class="num">{e(logged.cell(values[s.variant][n]))}</td>'
                for n in names) + "</tr>" for s in f.shown + f.rest if s.variant in values]
            parts += ["<h2>Final values of the logged metrics</h2>",
                      f'<p class="note">Each run\'s last logged value; mean over the finished '
                      f'seeds [{round(100 * f.confidence)}% CI].</p>',
                      table(["variant", *(logged.header(f.ab, n) for n in names)], rows,
                            what="variants", fold_at=len(f.shown))]
        return parts

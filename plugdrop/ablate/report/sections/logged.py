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
        return [f"final {f.ab.config.decision.metric.name}: each run's last logged value, mean "
                f"over the finished seeds [{conf}% confidence interval, t-distribution]; one "
                f"seed has no interval."]

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
                f'<td class="num">{e(values[s.variant][n].format(1.0, 4))}</td>'
                for n in names) + "</tr>" for s in f.shown + f.rest if s.variant in values]
            parts += ["<h2>Final values of the logged metrics</h2>",
                      f'<p class="note">Each run\'s last logged value; mean over the finished '
                      f'seeds [{round(100 * f.confidence)}% CI].</p>',
                      table(["variant", *names], rows, what="variants",
                            fold_at=len(f.shown))]
        return parts

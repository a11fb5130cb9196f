"""The report of an ablation whose runs a ``program:`` trained: what it logged, shown as it
logged it. Every metric gets a learning curve (mean over seeds, a band from the lowest to the
highest seed, against ``step`` or ``epoch``) and a row of final values per variant (each run's
last logged value, mean over the finished seeds with a t-interval); ``results.csv`` gets a
column per metric. What only plugdrop's trainer
records (accuracy per epoch, calibration bins, the measured drop fraction, Grad-CAM) is left out
of a program's report, each with a line saying why (:data:`LEFT_OUT`).
"""

from __future__ import annotations

import base64
import csv
import html
import io
import math
import statistics
from typing import Any

from ..runs import POSITION, logged_names, number
from .plots import figure, plotted_runs, png
from ..results import FAILED, FINISHED, Ablation
from ..decide.stats import Interval, mean_ci

__all__ = ["LEFT_OUT", "MOST_CURVES", "csv_bytes", "final_values", "html_sections",
           "metrics_of", "plot_curves", "text_lines"]

#: what a program's report leaves out, and why (the plots of plugdrop's trainer)
LEFT_OUT = (
    "accuracy per epoch and final accuracy (val_acc.png, final_acc.png): plugdrop's trainer "
    "records val_acc every epoch; the program's own metrics are drawn instead",
    "calibration (calibration.png): it needs the confidence bins plugdrop's trainer records "
    "at the last epoch",
    "the drop fraction against its schedule (drop_frac.png): it needs the statistics of the "
    "layers plugdrop's trainer watches",
    "Grad-CAM: it needs the model, which is the program's")
#: at most so many metrics get a learning curve (the others are in results.csv and .json)
MOST_CURVES = 30


def metrics_of(ab: Ablation) -> list[str]:
    """Every metric the runs logged: the decision metric first, then in the order met."""
    names: dict[str, None] = {ab.config.decide_on.name: None}
    for r in ab.runs:
        for name in logged_names(r.metrics):
            names.setdefault(name, None)
    logged = {n for r in ab.runs for n in logged_names(r.metrics)}
    return [n for n in names if n in logged or n == ab.config.decide_on.name]


def final_values(ab: Ablation, confidence: float = 0.95) -> dict[str, dict[str, Interval]]:
    """Variant -> metric -> the mean of its finished runs' last logged values (finite ones)
    with a t-interval."""
    out: dict[str, dict[str, Interval]] = {}
    for v in ab.variants:
        fin = [r for r in ab.runs if r.variant == v and r.status == FINISHED]
        row: dict[str, Interval] = {}
        for name in metrics_of(ab):
            values = [x for r in fin if (x := r.final(name)) is not None and math.isfinite(x)]
            row[name] = mean_ci(values, confidence)
        out[v] = row
    return out


def _cell(iv: Interval, name: str, ab: Ablation) -> str:
    """A final value as logged (4 decimals; the main table shows the decision metric in its
    display units)."""
    return iv.format(1.0, 4)


def text_lines(ab: Ablation, confidence: float = 0.95) -> list[str]:
    """The final values of every logged metric as a text table (a row per metric, a column
    per variant)."""
    values = final_values(ab, confidence)
    names = metrics_of(ab)
    if not names or not any(iv.n for row in values.values() for iv in row.values()):
        return []
    header = ["metric", *ab.variants]
    rows = [[name, *(_cell(values[v][name], name, ab) for v in ab.variants)] for name in names]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    conf = round(100 * confidence)
    return ["", f"Final values of the metrics the program logged (each run's last value; mean "
                f"over the finished seeds [{conf}% CI]):", fmt(header),
            fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)]


def csv_bytes(ab: Ablation) -> bytes:
    """``results.csv`` of a program's runs: a row per run and logged record, a column per
    metric (``variant, seed, epoch, step``, then the metrics)."""
    names = metrics_of(ab)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["variant", "seed", *POSITION, *names])
    for r in ab.runs:
        if r.status == FAILED:
            continue
        for m in r.metrics:
            cells = [m.get(k) for k in (*POSITION, *names)]
            w.writerow([r.variant, r.seed, *("" if c is None or isinstance(c, (dict, list))
                                             else repr(c) if isinstance(c, float) else c
                                             for c in cells)])
    return buf.getvalue().encode("utf-8")


def _x(rec: dict[str, Any]) -> int | None:
    x = rec.get("step", rec.get("epoch"))
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def plot_curves(ab: Ablation) -> bytes | None:
    """A learning curve per logged metric (the first :data:`MOST_CURVES`): per variant the
    mean over seeds against ``step`` (or ``epoch``), a band from the lowest to the highest
    seed."""
    from matplotlib.ticker import MaxNLocator

    names = metrics_of(ab)[:MOST_CURVES]
    series: dict[str, dict[str, dict[int, list[float]]]] = {}
    by_step: dict[str, bool] = {}
    counts: dict[str, tuple[int, str]] = {}
    for v in ab.variants:
        runs, suffix = plotted_runs(ab, v)
        counts[v] = (len(runs), suffix)
        for r in runs:
            for rec in r.metrics:
                x = _x(rec)
                for name in names:
                    y = number(rec.get(name))
                    if x is None or y is None or not math.isfinite(y):
                        continue
                    by_step[name] = by_step.get(name, False) or "step" in rec
                    series.setdefault(name, {}).setdefault(v, {}).setdefault(x, []).append(y)
    drawn = [n for n in names if n in series]
    if not drawn:
        return None
    cols = min(3, len(drawn))
    rows = math.ceil(len(drawn) / cols)
    fig = figure(4.2 * cols, 3.2 * rows + 0.6)
    for k, name in enumerate(drawn):
        ax = fig.add_subplot(rows, cols, k + 1)
        for i, v in enumerate(ab.variants):
            points = series[name].get(v)
            if not points:
                continue
            xs = sorted(points)
            n, suffix = counts[v]
            ax.plot(xs, [statistics.fmean(points[x]) for x in xs], marker="o", ms=2.5,
                    color=f"C{i}", label=f"{v}{suffix} (n={n})")
            if n > 1:
                ax.fill_between(xs, [min(points[x]) for x in xs], [max(points[x]) for x in xs],
                                color=f"C{i}", alpha=0.15)
        decided = " (decide_on)" if name == ab.config.decide_on.name else ""
        ax.set_title(f"{name}{decided}", fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("step" if by_step.get(name) else "epoch", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if k == 0:
            ax.legend(fontsize=6)
    fig.suptitle("What the program logged (mean over seeds; band: lowest to highest seed)",
                 fontsize=10)
    return png(fig)


def html_sections(ab: Ablation, curves: bytes | None, confidence: float = 0.95) -> list[str]:
    """The page's sections of a program's report: the learning curves (``curves``: the PNG
    of :func:`plot_curves`), the final values of every logged metric, and what is left out
    and why."""
    e = html.escape
    names = metrics_of(ab)
    parts = ["<h2>Learning curves</h2>"]
    if curves is not None:
        shown = names[:MOST_CURVES]
        more = len(names) - len(shown)
        parts.append(f'<img alt="learning curves" src="data:image/png;base64,'
                     f'{base64.b64encode(curves).decode("ascii")}">')
        if more > 0:
            parts.append(f'<p class="note">{more} more metrics are in results.csv and '
                         f'results.json.</p>')
    else:
        parts.append('<p class="note">No curve yet: no run has logged a metric.</p>')
    values = final_values(ab, confidence)
    if names:
        head = "".join(f"<th>{e(v)}</th>" for v in ab.variants)
        rows = "".join(
            f"<tr><td>{e(n)}</td>" + "".join(
                f'<td class="num">{e(_cell(values[v][n], n, ab))}</td>' for v in ab.variants)
            + "</tr>" for n in names)
        parts += ["<h2>Final values of the logged metrics</h2>",
                  f'<p class="note">Each run\'s last logged value; mean over the finished '
                  f'seeds [{round(100 * confidence)}% CI].</p>',
                  f"<table><tr><th>metric</th>{head}</tr>{rows}</table>"]
    parts += ["<h2>Left out</h2>", "<ul class=\"note\">" + "".join(
        f"<li>{e(line)}.</li>" for line in LEFT_OUT) + "</ul>"]
    return parts

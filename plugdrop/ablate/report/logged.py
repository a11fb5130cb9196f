"""The report of an ablation whose runs a ``program:`` trained: what it logged, shown as it
logged it. Every metric gets a learning curve (mean over seeds, a band from the lowest to the
highest seed, against ``step`` or ``epoch``) and a row of final values per variant (each run's
last logged value, mean over the finished seeds with a t-interval); ``results.csv`` gets a
column per metric (the report's ``logged`` section, :mod:`.sections.logged`, shows them).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ..config.metrics import supported_digits
from ..runs import POSITION, logged_names, number, thinned
from .plots import figure, plotted_runs, png
from ..results import FAILED, FINISHED, Ablation
from ..decide.stats import Interval, mean_ci

__all__ = ["MOST_CURVES", "TEXT_METRICS", "cell", "csv_bytes", "final_values", "header",
           "metrics_of", "plot_curves", "text_lines"]

#: at most so many metrics get a learning curve (the others are in results.csv and .json)
MOST_CURVES = 30
#: the metrics of the printed table's columns (all are in results.json and on the page)
TEXT_METRICS = 4


def metrics_of(ab: Ablation) -> list[str]:
    """Every metric the runs logged: the decision metric first, then in the order met
    (computed once per folder read)."""
    if "metrics" not in ab.memo:
        names: dict[str, None] = {ab.config.decide_on.name: None}
        for r in ab.runs:
            for name in logged_names(r.metrics):
                names.setdefault(name, None)
        ab.memo["metrics"] = list(names)
    return list(ab.memo["metrics"])


def final_values(ab: Ablation, confidence: float = 0.95) -> dict[str, dict[str, Interval]]:
    """Variant -> metric -> the mean of its finished runs' last logged values (finite ones)
    with a t-interval (computed once per folder read and confidence)."""
    key = f"final_values@{confidence!r}"
    if key in ab.memo:
        return ab.memo[key]
    names = metrics_of(ab)
    finished: dict[str, list[Any]] = {v: [] for v in ab.variants}
    for r in ab.runs:
        if r.status == FINISHED:
            finished.setdefault(r.variant, []).append(r)
    out: dict[str, dict[str, Interval]] = {}
    for v in ab.variants:
        last = [_last_values(r.metrics) for r in finished[v]]
        row: dict[str, Interval] = {}
        for name in names:
            values = [x for got in last if (x := got.get(name)) is not None
                      and math.isfinite(x)]
            row[name] = mean_ci(values, confidence)
        out[v] = row
    ab.memo[key] = out
    return out


def _last_values(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Each metric's last number in ``records`` (as :meth:`Run.final` reads it)."""
    out: dict[str, float] = {}
    for rec in reversed(records):
        for k, v in rec.items():
            if k not in out and (x := number(v)) is not None:
                out[k] = x
    return out


def cell(iv: Interval) -> str:
    """A final value as logged, to the digits its interval supports
    (:func:`~plugdrop.ablate.config.supported_digits`): ``"27.1 [23.9, 30.3]"``."""
    return iv.format(1.0, supported_digits(iv.half_width, iv.mean))


def header(ab: Ablation, name: str) -> str:
    """A metric's column header: its name, and the decision metric's ``unit`` when given."""
    own = ab.config.decide_on.own_unit if name == ab.config.decide_on.name else ""
    return f"{name} ({own})" if own else name


def text_lines(ab: Ablation, confidence: float = 0.95,
               variants: Sequence[str] | None = None) -> list[str]:
    """The final values of the logged metrics as a text table: a row per variant (those of
    ``variants``, default all), a column per metric (the first :data:`TEXT_METRICS`, the
    decision metric first; the others are in ``results.json`` and on the page)."""
    values = final_values(ab, confidence)
    names = metrics_of(ab)
    if not names or not any(iv.n for row in values.values() for iv in row.values()):
        return []
    rows_of = list(ab.variants if variants is None else variants)
    cols = names[:TEXT_METRICS]
    heads = ["variant", *(header(ab, n) for n in cols)]
    rows = [[v, *(cell(values[v][n]) for n in cols)] for v in rows_of if v in values]
    widths = [max(len(r[i]) for r in [heads, *rows]) for i in range(len(heads))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    conf = round(100 * confidence)
    more = len(names) - len(cols)
    return ["", f"Final values of the metrics the program logged (each run's last value; mean "
                f"over the finished seeds [{conf}% CI])"
                + (f"; {more} more metrics in results.json and report.html" if more > 0 else "")
                + ":", fmt(heads), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)]


def csv_bytes(ab: Ablation) -> bytes:
    """``results.csv`` of a program's runs: a row per run and logged record (at most
    :data:`~plugdrop.ablate.runs.records.MOST_KEPT` of a run, evenly spaced; its
    ``metrics.jsonl`` holds every one), a column per metric (``variant, seed, epoch, step``,
    then the metrics)."""
    names = metrics_of(ab)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["variant", "seed", *POSITION, *names])
    for r in ab.runs:
        if r.status == FAILED:
            continue
        for m in thinned(r.metrics):
            cells = [m.get(k) for k in (*POSITION, *names)]
            w.writerow([r.variant, r.seed, *("" if c is None or isinstance(c, (dict, list))
                                             else repr(c) if isinstance(c, float) else c
                                             for c in cells)])
    return buf.getvalue().encode("utf-8")


def _x(rec: Mapping[str, Any]) -> int | None:
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
            for rec in thinned(r.metrics):
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

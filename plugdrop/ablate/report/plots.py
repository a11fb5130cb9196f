"""The plots of an ablation, as PNG bytes: accuracy per epoch, final accuracy per variant, and
the measured drop fraction against the scheduled one."""

from __future__ import annotations

import io
import math
import statistics
from collections.abc import Sequence
from typing import Any

from ..results import FINISHED, INCOMPLETE, Ablation, Run, as_dict, number
from .summary import VariantSummary

__all__ = ["figure", "plot_drop_frac", "plot_final_acc", "plot_val_acc", "plotted_runs", "png"]

_DROP = "/drop_frac"
_SCHEDULED = "/p"


def figure(width: float = 7.0, height: float = 4.5) -> Any:
    """A matplotlib Figure on the Agg canvas (no pyplot, no global state)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def png(fig: Any) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, metadata={"Software": None})
    return buf.getvalue()


def plotted_runs(ab: Ablation, variant: str) -> tuple[list[Run], str]:
    """The runs a curve shows: the finished ones, or the incomplete ones while none finished."""
    runs = [r for r in ab.runs if r.variant == variant and r.metrics]
    fin = [r for r in runs if r.status == FINISHED]
    if fin:
        return fin, ""
    return [r for r in runs if r.status == INCOMPLETE], " (incomplete)"


def plot_val_acc(ab: Ablation, confidence: float) -> bytes | None:
    """Validation accuracy per epoch: the mean over seeds, with a band from the lowest to the
    highest seed (a t-interval of two or three seeds spans half the axis and says little)."""
    from matplotlib.ticker import MaxNLocator

    fig = figure()
    ax = fig.add_subplot()
    drawn = False
    for i, v in enumerate(ab.variants):
        runs, suffix = plotted_runs(ab, v)
        per_epoch: dict[int, list[float]] = {}
        for r in runs:
            for m in r.metrics:
                if "val_acc" in m:  # an epoch not evaluated (eval_every) is not drawn
                    per_epoch.setdefault(m["epoch"], []).append(float(m["val_acc"]))
        if not per_epoch:
            continue
        epochs = sorted(per_epoch)
        ax.plot(epochs, [100 * statistics.fmean(per_epoch[e]) for e in epochs], marker="o",
                ms=3, color=f"C{i}", label=f"{v}{suffix} (n={len(runs)})")
        if len(runs) > 1:
            ax.fill_between(epochs, [100 * min(per_epoch[e]) for e in epochs],
                            [100 * max(per_epoch[e]) for e in epochs], color=f"C{i}",
                            alpha=0.15)
        drawn = True
    if not drawn:
        return None
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title("Validation accuracy (mean over seeds; band: lowest to highest seed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return png(fig)


def plot_final_acc(summary: Sequence[VariantSummary]) -> bytes | None:
    """Final accuracy per variant: bars at the mean with confidence-interval error bars."""
    shown = [s for s in summary if s.final.n > 0]
    if not shown:
        return None
    fig = figure(max(4.5, 1.4 * len(shown) + 1.5))
    ax = fig.add_subplot()
    means = [100 * s.final.mean for s in shown]
    errs = [100 * (s.final.half_width or 0.0) for s in shown]
    x = list(range(len(shown)))
    ax.bar(x, means, yerr=errs, capsize=6, color=[f"C{i}" for i in x])
    ax.set_xticks(x, [f"{s.variant}\n(n={s.final.n})" for s in shown], fontsize=8)
    lo, hi = min(m - e for m, e in zip(means, errs)), max(m + e for m, e in zip(means, errs))
    ax.set_ylim(max(0.0, lo - 5), min(100.0, hi + 3))
    for i, (m, e) in enumerate(zip(means, errs)):
        ax.text(i, m + e, f"{m:.1f}", ha="center", va="bottom", fontsize=8)
    conf = round(100 * shown[0].final.confidence)
    ax.set_ylabel("final validation accuracy (%)")
    ax.set_title(f"Final accuracy (mean over finished seeds, {conf}% CI)")
    ax.grid(alpha=0.3, axis="y")
    return png(fig)


def _schedule_epoch_means(points: Sequence[tuple[int, float | None, float]]) -> dict[int, float]:
    """Epoch means of a scheduled value known only at each epoch's end.

    ``points`` are ``(epoch, step at the epoch's end or None, value)`` sorted by epoch. Each
    epoch's mean is taken as the mean of the value at its start and at its end (exact for
    constant and linear schedules); the start of the first epoch is extrapolated linearly from
    the first two points (to step 0 when the steps are known), and clipped at 0.
    """
    out: dict[int, float] = {}
    for k, (epoch, step, end) in enumerate(points):
        if k > 0:
            start = points[k - 1][2]
        elif len(points) > 1:
            epoch2, step2, end2 = points[1]
            if epoch == 1 and step is not None and step2 is not None and step2 > step > 0:
                start = end - (end2 - end) * step / (step2 - step)  # back to step 0
            else:
                start = end - (end2 - end) / (epoch2 - epoch)  # one epoch back
            start = max(0.0, start)
        else:
            start = end
        out[epoch] = (start + end) / 2
    return out


def plot_drop_frac(ab: Ablation) -> bytes | None:
    """Measured drop fraction per layer (``watch``: ``<layer>/drop_frac``, the mean over the
    epoch's forwards) against the scheduled ``p`` (``values``: ``<attachment>/p``, turned into
    epoch means by :func:`_schedule_epoch_means`), both averaged over seeds, per variant."""
    from matplotlib.ticker import MaxNLocator

    measured: dict[tuple[str, str], dict[int, list[float]]] = {}
    scheduled: dict[tuple[str, str], dict[int, list[float]]] = {}
    for v in ab.variants:
        for r in plotted_runs(ab, v)[0]:
            sched_points: dict[str, list[tuple[int, float | None, float]]] = {}
            exact: dict[str, dict[int, float]] = {}  # the runner's own epoch means
            for m in r.metrics:
                for key, value in as_dict(m.get("values_mean")).items():
                    x = number(value)
                    if key.endswith(_SCHEDULED) and x is not None and math.isfinite(x):
                        exact.setdefault(key[: -len(_SCHEDULED)], {})[m["epoch"]] = x
                for key, value in as_dict(m.get("watch")).items():
                    x = number(value)
                    if key.endswith(_DROP) and x is not None and math.isfinite(x):
                        measured.setdefault((v, key[: -len(_DROP)]), {}).setdefault(
                            m["epoch"], []).append(x)
                for key, value in as_dict(m.get("values")).items():
                    x = number(value)
                    if key.endswith(_SCHEDULED) and x is not None and math.isfinite(x):
                        sched_points.setdefault(key[: -len(_SCHEDULED)], []).append(
                            (m["epoch"], number(m.get("step")), x))
            for label, points in sched_points.items():
                means = {**_schedule_epoch_means(points), **exact.get(label, {})}
                for e, mean in means.items():
                    scheduled.setdefault((v, label), {}).setdefault(e, []).append(mean)
    if not measured:
        return None
    colors = {v: f"C{i}" for i, v in enumerate(ab.variants)}
    fig = figure(8.0, 5.0)
    ax = fig.add_subplot()
    styles = ["-", "-.", (0, (5, 1)), (0, (1, 1))]
    for kind, series in (("measured", measured), ("scheduled p", scheduled)):
        per_variant: dict[str, int] = {}
        for (v, name), by_epoch in sorted(series.items(), key=lambda kv: (
                ab.variants.index(kv[0][0]), kv[0][1])):
            epochs = sorted(by_epoch)
            k = per_variant[v] = per_variant.get(v, -1) + 1
            ax.plot(epochs, [statistics.fmean(by_epoch[e]) for e in epochs], color=colors[v],
                    ls=styles[k % len(styles)] if kind == "measured" else "--",
                    marker="o" if kind == "measured" else None, ms=3,
                    alpha=1.0 if kind == "measured" else 0.7, label=f"{v} {name}: {kind}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("fraction dropped")
    ax.set_title("Drop fraction: measured vs scheduled (epoch means, mean over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return png(fig)

"""The figures of the decisions: the verdicts as a forest plot, the seeds each variant got
against the design's maximum, and the calibration of each variant (a reliability diagram of
the last epoch, pooled over its finished seeds). PNG bytes, on the Agg canvas."""

from __future__ import annotations

from collections.abc import Sequence

from .plots import figure, png
from ..results import FINISHED, Ablation
from .summary import VariantSummary

__all__ = ["plot_calibration", "plot_forest", "plot_seeds"]

_COLORS = {"better": "#2a9d3f", "worse": "#c0392b", "equivalent": "#2c6fbb",
           "inconclusive": "#7f7f7f", "no clear difference": "#7f7f7f", "open": "#d68910"}


def plot_forest(summary: Sequence[VariantSummary], baseline: str | None) -> bytes | None:
    """Each variant's difference to the baseline with its interval, colored by its verdict;
    0 and the equivalence margin marked."""
    shown = [(s, iv) for s in summary if not s.is_baseline and (iv := s.versus())]
    if not shown or baseline is None:
        return None
    margin = shown[0][0].rule.margin
    fig = figure(7.5, max(2.8, 1.4 + 0.55 * len(shown)))
    ax = fig.add_subplot()
    ax.axvspan(-margin, margin, color="#2c6fbb", alpha=0.08, label=f"+-{margin:g} (margin)")
    ax.axvline(0.0, color="black", lw=0.8)
    for y, (s, (mean, lo, hi)) in enumerate(reversed(shown)):
        color = _COLORS.get(s.verdict.split(":")[0], "#7f7f7f")
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [y, y], color=color, lw=2.5)
        ax.plot([mean], [y], "o", color=color, ms=6)
        ax.text(hi if hi is not None else mean, y + 0.18, f" {s.verdict}", fontsize=8,
                color=color, va="bottom")
    ax.set_yticks(range(len(shown)), [s.variant for s, _ in reversed(shown)], fontsize=8)
    ax.set_ylim(-0.6, len(shown) - 0.2)
    label = shown[0][0].rule.metric.label
    unit = f" ({label})" if label else ""
    ax.set_xlabel(f"final {shown[0][0].metric} minus {baseline}'s{unit}")
    ax.set_title("Verdicts: differences to the baseline with their intervals")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=7, loc="lower right")
    return png(fig)


def plot_seeds(summary: Sequence[VariantSummary]) -> bytes | None:
    """The seeds each variant got from an adaptive design, against its maximum."""
    if not summary or summary[0].seeds_max is None:
        return None
    most = summary[0].seeds_max
    fig = figure(max(4.5, 1.2 * len(summary) + 1.5), 3.6)
    ax = fig.add_subplot()
    x = list(range(len(summary)))
    used = [s.seeds_used or 0 for s in summary]
    ax.bar(x, [most] * len(x), color="#dddddd", label=f"maximum ({most})")
    ax.bar(x, used, color=[_COLORS.get(s.verdict.split(":")[0], "#555555") for s in summary],
           label="seeds used")
    ax.set_xticks(x, [s.variant for s in summary], fontsize=8, rotation=15)
    ax.set_ylabel("seeds")
    ax.set_title("Seeds used by the adaptive design")
    ax.legend(fontsize=7)
    return png(fig)


def plot_calibration(ab: Ablation) -> bytes | None:
    """Reliability diagram per variant: accuracy against confidence in the 15 bins of the last
    epoch, pooled over the finished seeds; the diagonal is perfect calibration."""
    fig = figure(6.0, 5.0)
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="black", lw=0.8, ls="--")
    drawn = False
    for i, v in enumerate(ab.variants):
        count = conf = hit = None
        for r in ab.runs:
            cal = r.metrics[-1].get("calibration") if r.variant == v and r.metrics and \
                r.status == FINISHED else None
            if not isinstance(cal, dict):
                continue
            n = cal.get("count") or []
            c = [x or 0.0 for x in cal.get("confidence") or []]
            a = [x or 0.0 for x in cal.get("accuracy") or []]
            if count is None:
                count, conf, hit = [0.0] * len(n), [0.0] * len(n), [0.0] * len(n)
            for b in range(min(len(n), len(count))):
                count[b] += n[b]
                conf[b] += c[b] * n[b]  # type: ignore[index]
                hit[b] += a[b] * n[b]  # type: ignore[index]
        if not count:
            continue
        pts = [(cf / k, h / k) for k, cf, h in zip(count, conf, hit) if k]  # type: ignore[arg-type]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, color=f"C{i}",
                label=v)
        drawn = True
    if not drawn:
        return None
    ax.set_xlabel("confidence (top-1 probability)")
    ax.set_ylabel("accuracy")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title("Calibration at the last epoch (pooled over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return png(fig)

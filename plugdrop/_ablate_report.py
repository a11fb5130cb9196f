"""Results of an ablation: CSV, JSON, PNG plots and the summary table. Private."""

from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ._ablate_train import EpochRecord

COLUMNS = ("variant", "seed", "epoch", "train_loss", "val_loss", "val_acc", "epoch_time", "lr")


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summarize(records: list[EpochRecord], variants: list[str], baseline: str
              ) -> list[dict[str, Any]]:
    """Per variant: mean and std over seeds of the best and final validation accuracy, and
    the time per epoch relative to the baseline."""
    by_variant: dict[str, dict[int, list[EpochRecord]]] = {v: {} for v in variants}
    for r in records:
        by_variant[r.variant].setdefault(r.seed, []).append(r)
    times = {v: statistics.fmean(r.epoch_time for runs in s.values() for r in runs)
             for v, s in by_variant.items() if s}
    rows = []
    for v in variants:
        seeds = by_variant[v]
        if not seeds:
            continue
        best = [max(r.val_acc for r in runs) for runs in seeds.values()]
        final = [max(runs, key=lambda r: r.epoch).val_acc for runs in seeds.values()]
        bm, bs = _mean_std(best)
        fm, fs = _mean_std(final)
        rows.append({"variant": v, "seeds": len(seeds), "best_acc_mean": bm, "best_acc_std": bs,
                     "final_acc_mean": fm, "final_acc_std": fs,
                     "epoch_time": times[v],
                     "time_vs_baseline": times[v] / times[baseline] if baseline in times
                     else math.nan})
    return rows


def table(rows: list[dict[str, Any]], baseline: str) -> str:
    header = ("variant", "seeds", "best val acc", "final val acc", "s/epoch",
              f"time vs {baseline}")
    body = [(r["variant"], str(r["seeds"]),
             f"{100 * r['best_acc_mean']:.2f} ± {100 * r['best_acc_std']:.2f}",
             f"{100 * r['final_acc_mean']:.2f} ± {100 * r['final_acc_std']:.2f}",
             f"{r['epoch_time']:.2f}", f"{r['time_vs_baseline']:.2f}x") for r in rows]
    widths = [max(len(x[i]) for x in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
             for row in [header, tuple("-" * w for w in widths), *body]]
    return "\n".join(lines)


def write_csv(path: Path, records: list[EpochRecord]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in records:
            w.writerow([getattr(r, c) for c in COLUMNS])


def write_json(path: Path, records: list[EpochRecord], summary: list[dict[str, Any]],
               config: dict[str, Any], versions: dict[str, str], data: dict[str, Any]) -> None:
    path.write_text(json.dumps({"config": config, "versions": versions, "data": data,
                                "summary": summary, "records": [asdict(r) for r in records]},
                               indent=2, default=str))


def plot(out: Path, records: list[EpochRecord], summary: list[dict[str, Any]],
         variants: list[str]) -> list[Path]:
    """``val_acc.png`` (accuracy per epoch, mean with a band of one std over seeds) and
    ``final_acc.png`` (final accuracy per variant with error bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for v in variants:
        epochs = sorted({r.epoch for r in records if r.variant == v})
        if not epochs:
            continue
        stats = [_mean_std([r.val_acc for r in records if r.variant == v and r.epoch == e])
                 for e in epochs]
        mean = [100 * m for m, _ in stats]
        std = [100 * s for _, s in stats]
        ax.plot(epochs, mean, marker="o", ms=3, label=v)
        ax.fill_between(epochs, [m - s for m, s in zip(mean, std)],
                        [m + s for m, s in zip(mean, std)], alpha=0.2)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title("Validation accuracy (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths.append(out / "val_acc.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(summary)), 4.5))
    names = [r["variant"] for r in summary]
    means = [100 * r["final_acc_mean"] for r in summary]
    errs = [100 * r["final_acc_std"] for r in summary]
    ax.bar(names, means, yerr=errs, capsize=6, color=[f"C{i}" for i in range(len(names))])
    lo = min(m - e for m, e in zip(means, errs)) if means else 0
    ax.set_ylim(max(0.0, lo - 5), min(100.0, max(m + e for m, e in zip(means, errs)) + 2)
                if means else 100)
    for i, (m, e) in enumerate(zip(means, errs)):
        ax.text(i + 0.08, m + e, f"{m:.1f}", ha="left", va="bottom", fontsize=9)
    ax.set_ylabel("final validation accuracy (%)")
    ax.set_title("Final accuracy (mean ± std over seeds)")
    plt.setp(ax.get_xticklabels(), rotation=15, ha="right")
    fig.tight_layout()
    paths.append(out / "final_acc.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    # Measured drop fraction against the scheduled value, per variant and layer (means over
    # seeds): is each regularizer really active, and as much as asked?
    series: dict[tuple[str, str], dict[int, list[tuple[float, float]]]] = {}
    for r in records:
        for key, value in r.watch.items():
            if key.endswith("/drop_frac"):
                layer = key[: -len("/drop_frac")]
                p = next((v for k, v in r.watch.items() if k.startswith(layer + "/")
                          and k.rsplit("/", 1)[1] in ("p", "std")), math.nan)
                series.setdefault((r.variant, layer), {}).setdefault(r.epoch, []).append(
                    (value, p))
    if series:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, ((variant, layer), by_epoch) in enumerate(sorted(series.items())):
            epochs = sorted(by_epoch)
            measured = [statistics.fmean(v for v, _ in by_epoch[e]) for e in epochs]
            scheduled = [statistics.fmean(p for _, p in by_epoch[e]) for e in epochs]
            ax.plot(epochs, measured, marker="o", ms=3, color=f"C{i}",
                    label=f"{variant} {layer}: measured")
            ax.plot(epochs, scheduled, ls="--", color=f"C{i}", alpha=0.7,
                    label=f"{variant} {layer}: scheduled (end of epoch)")
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_ylabel("fraction dropped")
        ax.set_title("Measured drop fraction (epoch mean) vs schedule")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(out / "drop_frac.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths

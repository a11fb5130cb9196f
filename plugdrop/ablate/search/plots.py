"""The figures of a search, drawn from ``search.json`` alone (PNG bytes, on the ablation
report's Agg canvas): the importance of each searched dimension, the estimate against each
searched value, the history of the candidates, and the confirmation as a forest plot."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ..report.plots import figure, png

__all__ = ["plot_confirmation", "plot_history", "plot_importance", "plot_values"]

_STATUS = {"complete": "#2c6fbb", "stopped": "#6c8ebf", "open": "#d68910",
           "dropped": "#b0b0b0", "failed": "#c0392b"}
_VERDICT = {"better": "#2a9d3f", "worse": "#c0392b", "equivalent": "#2c6fbb"}


def _shown(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for c in doc["candidates"] if c["estimate"]["mean"] is not None]


def _label(doc: Mapping[str, Any]) -> str:
    unit = " (pp)" if doc.get("units") == "percentage points" else ""
    return f"{doc['metric']} minus the baseline's{unit}"


def plot_importance(doc: Mapping[str, Any]) -> bytes | None:
    """A bar per searched dimension: its share of the estimates' variance."""
    imp = doc.get("importance", {}).get("values") or {}
    if not imp:
        return None
    names = sorted(imp, key=lambda k: imp[k])
    fig = figure(6.5, 1.2 + 0.45 * len(names))
    ax = fig.add_subplot()
    ax.barh(range(len(names)), [imp[n] for n in names], color="#2c6fbb")
    ax.set_yticks(range(len(names)), names, fontsize=9)
    ax.set_xlabel(f"importance ({doc['importance'].get('evaluator') or 'Optuna'})")
    ax.set_xlim(0, 1)
    ax.set_title("What mattered")
    ax.grid(alpha=0.3, axis="x")
    return png(fig)


def _errorbar(ax: Any, x: float, c: Mapping[str, Any], best: bool) -> None:
    e = c["estimate"]
    color = "#2a9d3f" if best else _STATUS.get(c["status"], "#555555")
    if e["low"] is not None and e["high"] is not None:
        ax.plot([x, x], [e["low"], e["high"]], color=color, lw=1.2, alpha=0.7)
    ax.plot([x], [e["mean"]], "*" if best else "o", color=color, ms=11 if best else 5)


def plot_values(doc: Mapping[str, Any]) -> bytes | None:
    """One panel per searched dimension: each candidate's estimate (with its seeds' interval)
    against the value it took; the best as a star, dropped candidates grey."""
    dims = doc["space"]
    shown = _shown(doc)
    if not dims or not shown:
        return None
    best = (doc.get("best") or {}).get("candidate")
    cols = min(3, len(dims))
    rows = math.ceil(len(dims) / cols)
    fig = figure(4.2 * cols, 3.3 * rows)
    for i, d in enumerate(dims):
        ax = fig.add_subplot(rows, cols, i + 1)
        name = d["name"]
        if "choice" in d:
            labels = [str(_choice_label(v)) for v in d["choice"]]
            for c in shown:
                v = str(c["params"].get(name))
                x = labels.index(v) if v in labels else -1
                _errorbar(ax, x + 0.15 * ((c["trial"] or 0) % 5 - 2) / 2, c,
                          c["name"] == best)
            ax.set_xticks(range(len(labels)), labels, fontsize=8, rotation=15)
        else:
            for c in shown:
                _errorbar(ax, float(c["params"].get(name, math.nan)), c, c["name"] == best)
            if d.get("log"):
                ax.set_xscale("log")
        ax.axhline(0.0, color="black", lw=0.8)
        ax.set_xlabel(name)
        ax.set_ylabel(_label(doc) if i % cols == 0 else "", fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("Estimate against each searched value (grey: dropped, star: the best)",
                 fontsize=10)
    return png(fig)


def _choice_label(value: Any) -> Any:
    """A choice as Optuna holds it (:attr:`~.space.Dimension.labels`)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True)


def plot_history(doc: Mapping[str, Any]) -> bytes | None:
    """Each candidate's estimate in the order it was proposed, and the best so far."""
    shown = _shown(doc)
    if not shown:
        return None
    best = (doc.get("best") or {}).get("candidate")
    fig = figure(7.5, 3.8)
    ax = fig.add_subplot()
    run_best, xs, ys = -math.inf, [], []
    sign = 1.0 if doc["goal"] == "max" else -1.0
    for c in shown:
        x = int(c["name"][1:])
        _errorbar(ax, x, c, c["name"] == best)
        if c["status"] != "dropped":
            run_best = max(run_best, sign * c["estimate"]["mean"])
        if math.isfinite(run_best):
            xs.append(x)
            ys.append(sign * run_best)
    ax.step(xs, ys, where="post", color="#2a9d3f", lw=1.2, label="best so far")
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xlabel("candidate (in the order proposed)")
    ax.set_ylabel(_label(doc), fontsize=8)
    ax.set_title("History of the search")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return png(fig)


def plot_confirmation(doc: Mapping[str, Any]) -> bytes | None:
    """The best candidate's difference to the baseline: on the search's seeds (chosen as the
    best of many: biased upwards) and on the fresh seeds (the confirmation's interval, which
    agrees with its verdict); 0 and the margin marked."""
    best, conf = doc.get("best"), doc.get("confirmation")
    if best is None:
        return None
    rows = [(f"{best['candidate']} on the search's seeds (n={best['estimate']['n']})",
             best["estimate"]["mean"], best["estimate"]["low"], best["estimate"]["high"],
             "#7f7f7f", "chosen among many: biased")]
    if conf is not None and conf["interval"]["mean"] is not None:
        iv = conf["interval"]
        rows.append((f"{best['candidate']} on fresh seeds (n={conf['n']})", iv["mean"],
                     iv["low"], iv["high"], _VERDICT.get(conf["verdict"], "#7f7f7f"),
                     conf["verdict"]))
    fig = figure(7.5, 1.6 + 0.7 * len(rows))
    ax = fig.add_subplot()
    margin = float(doc.get("margin") or 0.0)
    ax.axvspan(-margin, margin, color="#2c6fbb", alpha=0.08, label=f"+-{margin:g} (margin)")
    ax.axvline(0.0, color="black", lw=0.8)
    for y, (label, mean, lo, hi, color, note) in enumerate(reversed(rows)):
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [y, y], color=color, lw=2.5)
        ax.plot([mean], [y], "o", color=color, ms=6)
        ax.text(hi if hi is not None else mean, y + 0.15, f" {note}", fontsize=8, color=color,
                va="bottom")
    ax.set_yticks(range(len(rows)), [r[0] for r in reversed(rows)], fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.3)
    ax.set_xlabel(_label(doc))
    ax.set_title("Confirmation against the baseline")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=7, loc="lower right")
    return png(fig)

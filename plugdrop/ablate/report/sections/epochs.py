"""What plugdrop's trainer records every epoch: validation accuracy (final, best, and the
EMA's) per variant in the tables, the learning curves (``val_acc.png``), the final accuracy
(``final_acc.png``), and ``results.csv`` with a row per run and epoch
(:data:`CSV_COLUMNS`)."""

from __future__ import annotations

import csv
import io
from typing import Any

from ...results import FAILED
from ..markup import e, img
from ..plots import plot_final_acc, plot_val_acc
from ..shown import focus
from .base import Column, Facts, Section

__all__ = ["CSV_COLUMNS", "Epochs"]

#: The columns of ``results.csv``: one row per run and epoch.
CSV_COLUMNS = ("variant", "seed", "epoch", "train_loss", "val_loss", "val_acc", "val_loss_ema",
               "val_acc_ema", "epoch_time", "images_per_s", "lr", "val_nll", "val_top5",
               "val_ece", "train_acc", "gap")

_PLOTS = (("val_acc.png", "Learning curves"), ("final_acc.png", "Final accuracy"))


def _cell(value: Any) -> str:
    if value is None or isinstance(value, (dict, list)):
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


class Epochs(Section):
    name = "epochs"
    shows_metric = "val_acc"

    def left_out(self) -> str:
        return ("accuracy per epoch and final accuracy (val_acc.png, final_acc.png): plugdrop's "
                "trainer records val_acc every epoch; the program's own metrics are drawn "
                "instead")

    def columns(self, f: Facts, page: bool) -> list[Column]:
        cols: list[Column] = [("final val acc %", lambda s: s.final.format())]
        if page:
            return cols
        cols.append(("best val acc %", lambda s: s.best.format()))
        if any(s.final_ema is not None for s in f.summary):
            cols.append(("final EMA acc %", lambda s: s.final_ema.format()
                         if s.final_ema is not None else "-"))
        return cols

    def note(self, f: Facts) -> list[str]:
        conf = round(100 * f.confidence)
        return [f"final/best val acc: mean over the finished seeds [{conf}% confidence interval, "
                "t-distribution]; one seed has no interval."]

    def plots(self, f: Facts) -> list[tuple[str, bytes | None]]:
        return [("val_acc.png", plot_val_acc(focus(f.ab, f.shown), f.confidence)),
                ("final_acc.png", plot_final_acc(f.shown))]

    def csv(self, f: Facts) -> bytes:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for r in f.ab.runs:
            if r.status == FAILED:
                continue
            for m in r.metrics:
                row = {**m, "variant": r.variant, "seed": r.seed}
                w.writerow([_cell(row.get(c)) for c in CSV_COLUMNS])
        return buf.getvalue().encode("utf-8")

    def html(self, f: Facts) -> list[str]:
        parts = []
        for name, heading in _PLOTS:
            path = f.out / name
            if path.is_file():
                parts += [f"<h2>{e(heading)}</h2>", img(path.read_bytes(), heading)]
        return parts

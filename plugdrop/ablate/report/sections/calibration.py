"""Calibration at the last epoch: a reliability diagram per variant, pooled over its finished
seeds (``calibration.png``), from the confidence bins plugdrop's trainer records."""

from __future__ import annotations

from ..figures import plot_calibration
from ..shown import focus
from .base import Facts, OnePlot

__all__ = ["Calibration"]


class Calibration(OnePlot):
    name = "calibration"
    file = "calibration.png"
    heading = "Calibration"

    def left_out(self) -> str:
        return ("calibration (calibration.png): it needs the confidence bins plugdrop's trainer "
                "records at the last epoch")

    def draw(self, f: Facts) -> bytes | None:
        return plot_calibration(focus(f.ab, f.shown))

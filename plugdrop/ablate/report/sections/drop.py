"""The drop fraction measured in each watched layer against the scheduled ``p``
(``drop_frac.png``), from the statistics plugdrop's trainer watches."""

from __future__ import annotations

from ..plots import plot_drop_frac
from ..shown import focus
from .base import Facts, OnePlot

__all__ = ["DropFraction"]


class DropFraction(OnePlot):
    name = "drop_fraction"
    file = "drop_frac.png"
    heading = "Drop fraction against the schedule"

    def left_out(self) -> str:
        return ("the drop fraction against its schedule (drop_frac.png): it needs the "
                "statistics of the layers plugdrop's trainer watches")

    def draw(self, f: Facts) -> bytes | None:
        return plot_drop_frac(focus(f.ab, f.shown))

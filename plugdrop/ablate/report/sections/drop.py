"""The drop fraction measured in each watched layer against the scheduled ``p``
(``drop_frac.png``), from the statistics plugdrop's trainer watches."""

from __future__ import annotations

from ..markup import e, img
from ..plots import plot_drop_frac
from ..shown import focus
from .base import Facts, Section

__all__ = ["DropFraction"]

_HEADING = "Drop fraction against the schedule"


class DropFraction(Section):
    name = "drop_fraction"

    def left_out(self) -> str:
        return ("the drop fraction against its schedule (drop_frac.png): it needs the "
                "statistics of the layers plugdrop's trainer watches")

    def plots(self, f: Facts) -> list[tuple[str, bytes | None]]:
        return [("drop_frac.png", plot_drop_frac(focus(f.ab, f.shown)))]

    def html(self, f: Facts) -> list[str]:
        path = f.out / "drop_frac.png"
        if not path.is_file():
            return []
        return [f"<h2>{e(_HEADING)}</h2>", img(path.read_bytes(), _HEADING)]

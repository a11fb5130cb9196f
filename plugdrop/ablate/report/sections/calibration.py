"""Calibration at the last epoch: a reliability diagram per variant, pooled over its finished
seeds (``calibration.png``), from the confidence bins plugdrop's trainer records."""

from __future__ import annotations

from ..figures import plot_calibration
from ..markup import e, img
from ..shown import focus
from .base import Facts, Section

__all__ = ["Calibration"]


class Calibration(Section):
    name = "calibration"

    def left_out(self) -> str:
        return ("calibration (calibration.png): it needs the confidence bins plugdrop's trainer "
                "records at the last epoch")

    def plots(self, f: Facts) -> list[tuple[str, bytes | None]]:
        return [("calibration.png", plot_calibration(focus(f.ab, f.shown)))]

    def html(self, f: Facts) -> list[str]:
        path = f.out / "calibration.png"
        if not path.is_file():
            return []
        return [f"<h2>{e('Calibration')}</h2>", img(path.read_bytes(), "Calibration")]

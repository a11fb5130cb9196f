"""The report's sections, one file each, in the order the page shows them
(:data:`SECTIONS`). Each says whether it applies to a folder (every study's, or one its runs
supply: ``ablation.json`` lists the sections of the program that trained them) and what it adds
to the printed table, the page and the files (:class:`~.base.Section`). The report composes
the sections that apply and knows nothing of which program trained."""

from __future__ import annotations

from collections.abc import Sequence

from ...results import Ablation
from ..shown import pick
from ..summary import VariantSummary
from .attached import Attached
from .base import Column, Facts, Section
from .calibration import Calibration
from .decisions import Decisions
from .drop import DropFraction
from .epochs import CSV_COLUMNS, Epochs
from .gradcam import GradCam
from .logged import Logged
from .robust import Robust
from .verdicts import Verdicts

__all__ = ["CSV_COLUMNS", "Column", "Facts", "SECTIONS", "Section", "facts", "left_out"]

#: every section, in the page's order
SECTIONS: tuple[Section, ...] = (Verdicts(), Robust(), Logged(), Attached(), Epochs(),
                                 Calibration(), DropFraction(), GradCam(), Decisions())


def facts(ab: Ablation, summary: Sequence[VariantSummary], confidence: float = 0.95) -> Facts:
    """What the sections read of ``ab`` and its ``summary``: the variants shown
    (:func:`~..shown.pick`) and the sections that apply."""
    shown, rest = pick(summary)
    f = Facts(ab, list(summary), shown, rest, confidence)
    f.sections = [s for s in SECTIONS if s.applies(f)]
    return f


def left_out(f: Facts) -> list[str]:
    """What the report of ``f``'s folder leaves out, and why (one line per section its runs
    do not supply)."""
    return [line for s in SECTIONS if not s.applies(f) and (line := s.left_out()) is not None]

"""What a section of the report is (:class:`Section`) and what every section reads
(:class:`Facts`: the folder, the summary per variant, the variants shown)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ...results import Ablation
from ..markup import e, img
from ..summary import VariantSummary

__all__ = ["Column", "Facts", "OnePlot", "Section"]

#: a column of the tables: its header and its cell of a variant
Column = tuple[str, Callable[[VariantSummary], str]]


@dataclass
class Facts:
    """What the sections read.

    Attributes:
        ab: the folder as read (:func:`~plugdrop.ablate.results.load_ablation`).
        summary: one :class:`VariantSummary` per variant, in the config's order.
        shown, rest: the variants the tables and plots show in full, and the others
            (:func:`~..shown.pick`).
        confidence: the intervals' confidence level.
        sections: the sections that apply to the folder, in order (set by :func:`facts`).
    """

    ab: Ablation
    summary: list[VariantSummary]
    shown: list[VariantSummary]
    rest: list[VariantSummary]
    confidence: float = 0.95
    sections: list[Section] = field(default_factory=list)

    @property
    def out(self) -> Path:
        return self.ab.out


class Section:
    """A part of the report: whether it applies to a folder, and what it adds to each of the
    report's forms (the printed table's columns and lines, the page, the files). The report
    shows the sections that apply, in the order of :data:`~.SECTIONS`; each section says
    nothing of the others. Every method has a default that adds nothing."""

    #: its name, as the programs' ``sections`` (in ``ablation.json``) list it
    name: ClassVar[str]
    #: shown for every study (not one a program supplies)
    always: ClassVar[bool] = False
    #: the decision metric its columns show already (no column of its own then)
    shows_metric: ClassVar[str | None] = None

    def applies(self, f: Facts) -> bool:
        """Whether the folder's runs supply this section."""
        return self.always or self.name in f.ab.sections

    def columns(self, f: Facts, page: bool) -> list[Column]:
        """Columns of the verdict table (``page``: the page's, else the printed one's)."""
        return []

    def note(self, f: Facts) -> list[str]:
        """Lines right under the printed table (what its values are)."""
        return []

    def text(self, f: Facts) -> list[str]:
        """Lines of the printed table after its notes."""
        return []

    def plots(self, f: Facts) -> list[tuple[str, bytes | None]]:
        """Its PNG plots, ``(file name, bytes)``; ``None``: nothing to draw (no stale file
        is left either)."""
        return []

    def csv(self, f: Facts) -> bytes | None:
        """``results.csv``, when this section's records make its rows."""
        return None

    def data(self, f: Facts) -> dict[str, Any]:
        """What it adds to ``results.json``."""
        return {}

    def html(self, f: Facts) -> list[str]:
        """Its parts of the page, in order."""
        return []

    def left_out(self) -> str | None:
        """What a report without this section leaves out, and why (said on the page)."""
        return None


class OnePlot(Section):
    """A section that is one plot: drawn into :attr:`file` by :meth:`draw`, shown on the page
    under :attr:`heading`."""

    #: the PNG's file name in the folder
    file: ClassVar[str]
    #: its heading on the page
    heading: ClassVar[str]

    def draw(self, f: Facts) -> bytes | None:
        """The PNG (``None``: nothing to draw)."""
        raise NotImplementedError

    def plots(self, f: Facts) -> list[tuple[str, bytes | None]]:
        return [(self.file, self.draw(f))]

    def html(self, f: Facts) -> list[str]:
        path = f.out / self.file
        if not path.is_file():
            return []
        return [f"<h2>{e(self.heading)}</h2>", img(path.read_bytes(), self.heading)]

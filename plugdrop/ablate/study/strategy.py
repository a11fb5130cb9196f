"""What a kind of study is: a :class:`Strategy` answers "given the runs that ended so far, which
runs next, or done?" (:meth:`Strategy.next_round`), learns of each run as it ends
(:meth:`Strategy.ended`) and describes itself for ``ablation.json``. The driver
(:mod:`.driver`) does everything else the same way for every strategy: the folder, the
launchers, resume, the outcome, the events.

A strategy's state is a pure function of the runs that ended: a study stopped at any moment
and resumed asks for the same runs and ends with the same result. :meth:`Strategy.open` reads
what ended before (once, at the start); from then on the state is kept up to date run by run,
never by reading every run folder again.

The strategies, one file each: :mod:`.grid` (a fixed list of seeds: every variant x seed),
:mod:`.adaptive` (seeds in rounds until each variant is decided), :mod:`.search` (candidates
proposed by a sampler, raced, the best confirmed on fresh seeds).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .listener import Listener
from .listeners import Console, DecisionsFile, ReportWriter
from .round import Round

if TYPE_CHECKING:
    from ..config import AblationConfig
    from ..programs import Program
    from ..results import Run
    from ..train import Dist

__all__ = ["Claim", "Context", "Round", "Strategy"]


@dataclass(frozen=True)
class Claim:
    """How the study claims its folder: with ``--resume``, as a ``--shard``, the program
    (what it records), this process's place, and whether changed data files may go on."""

    resume: bool
    shard: tuple[int, int] | None
    program: Program
    d: Dist
    accept_data_change: bool = False


@dataclass
class Context:
    """What a strategy may use: this process's place under torchrun, the program that trains
    the runs (prepared; plugdrop's trainer holds the data it loaded), and
    :meth:`ended_before`, the runs that ended before this invocation."""

    d: Dist
    program: Program
    read: Callable[[], list[Run]]
    _ended: list[Run] | None = field(default=None, repr=False)

    def ended_before(self) -> list[Run]:
        """Every run of the folder that ended (finished or failed) before this invocation,
        read once (on rank 0, shared with the others), when a strategy first asks."""
        if self._ended is None:
            self._ended = self.read()
        return self._ended


class Strategy(ABC):
    """A kind of study. Subclasses set :attr:`name` and :attr:`command` and implement
    :meth:`next_round`; the others have defaults that fit an ablation of one config.

    Args:
        cfg: the study's checked config.
        out: the study's folder.
    """

    #: how ``ablation.json`` and the header name it
    name: ClassVar[str]
    #: the command that runs it (``ablate``, ``search``): messages start ``plugdrop COMMAND:``
    command: ClassVar[str] = "ablate"
    #: whether its runs belong to one config hash (an ablation's; a search's config grows with
    #: its candidates, and its fingerprint guards the folder instead)
    hashed: ClassVar[bool] = True

    def __init__(self, cfg: AblationConfig, out: Path) -> None:
        self.cfg = cfg
        self.out = out

    @property
    def runs_in(self) -> Path:
        """The folder holding the run folders (``runs/<id>/``) and their ``ablation.json``."""
        return self.out

    def describe(self) -> dict[str, Any]:
        """What ``ablation.json`` records of the strategy (``{"name": ...}`` and its
        settings)."""
        return {"name": self.name}

    def claim(self, how: Claim) -> str | None:
        """Under the folder's lock: refuse the folder in one line (:class:`ConfigError`), or
        record the study in it. Returns a warning to show, or ``None``. An ablation's:
        :func:`~.folder.claim_ablation`."""
        from .folder import claim_ablation, manifest

        doc = manifest(self.cfg, how.program, how.d, self.describe())
        return claim_ablation(self.out, self.cfg, doc, how.resume, how.shard, how.program,
                              how.accept_data_change)

    def listeners(self) -> list[Listener]:
        """The listeners of the study when its caller names none: the console's header lines,
        the report rebuilt while runs end and at the end, and ``decisions.jsonl``."""
        return [Console(), ReportWriter(), DecisionsFile()]

    def before_round(self, rnd: Round, program: Program, d: Dist) -> None:
        """On rank 0, before the round's runs are handed out: what its jobs must find in the
        folder (a search records its runs so far and the round's config)."""

    def open(self, ctx: Context) -> None:
        """The study starts (or resumes), its folder claimed: what ended before is
        :meth:`Context.ended_before`."""

    @abstractmethod
    def next_round(self) -> Round | None:
        """The runs to train next, or ``None`` when the study is over."""

    def ended(self, run: Run) -> None:
        """A run this invocation trained ended (``run``: its folder as read now)."""

    def decisions(self) -> list[dict[str, Any]] | None:
        """The decisions taken so far, for ``decisions.jsonl`` (``None``: this strategy writes
        none)."""
        return None

    def result(self) -> Any:
        """What the outcome carries of the strategy (a search's last step)."""
        return None

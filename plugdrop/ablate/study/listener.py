"""What happens in a study, told to whoever listens: the :class:`Listener` base class (one
method per event, each a no-op by default, as Lightning's callbacks), and :class:`Listeners`,
the driver's fan-out to all of them.

The driver emits; the listeners (``listeners/``: the report, ``decisions.jsonl``, the console,
the search's results) react, each in a file of its own. A listener never changes what the study
does: what it writes is presentation, rebuilt from the run folders at any time (``plugdrop
report``). A listener that raises a :class:`~plugdrop.ablate.errors.Fault` (the folder takes no
file) stops the study, as a job's fault does; any other failure of a listener is the listener's
to report, never a lost run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import AblationConfig
    from ..programs import Program
    from ..runs import RunDir
    from ..train import Dist
    from .outcome import Outcome
    from .round import Round

__all__ = ["Listener", "Listeners", "StudyInfo"]


@dataclass
class StudyInfo:
    """What a listener knows of the study: the command (``ablate``, ``search``), its folder
    (``out``) and the folder of its runs (``runs_in``: ``out``, or a search's ``out/trials``),
    the config the runs train under now (a search's grows with its candidates), this
    process's place under torchrun, the strategy, the launcher's name, the program and the
    shard."""

    command: str
    out: Path
    runs_in: Path
    cfg: AblationConfig
    d: Dist
    #: the :class:`~.strategy.Strategy` (its own attributes are its own business)
    strategy: Any
    launcher: str = "local"
    program: Program | None = None
    shard: tuple[int, int] | None = None
    #: the rounds started so far in this invocation
    rounds: int = 0

    @property
    def main(self) -> bool:
        """Whether this process writes (rank 0 under torchrun)."""
        return bool(self.d.main)


class Listener:
    """Reacts to what happens in a study. Override the events you need."""

    def on_study_start(self, study: StudyInfo) -> None:
        """The folder is claimed and the strategy knows what finished before."""

    def on_round_start(self, study: StudyInfo, round: Round) -> None:
        """The runs of ``round`` are about to be handed to the launcher."""

    def on_run_end(self, study: StudyInfo, run: RunDir, state: str, detail: str | None) -> None:
        """``run`` ended: ``state`` is ``finished`` or ``failed`` (``detail``: its error)."""

    def on_run_stopped(self, study: StudyInfo, run: RunDir, why: str) -> None:
        """``run``'s job ended before the run did (``why``: retried, waiting for another
        process, stopped by a signal)."""

    def on_decision(self, study: StudyInfo, decisions: Sequence[dict[str, Any]]) -> None:
        """The decisions taken so far, in the order taken (each a JSON object with its round,
        seeds, variant, verdict and reason)."""

    def on_round_end(self, study: StudyInfo, round: Round) -> None:
        """Every run of ``round`` ended, or the study stopped during it."""

    def on_message(self, study: StudyInfo, text: str) -> None:
        """A line for the person watching (a retry, a warning)."""

    def on_study_end(self, study: StudyInfo, outcome: Outcome) -> None:
        """The study ended, was stopped or met a fault; ``outcome`` says which."""


class Listeners(Listener):
    """Every listener of a study, told each event in order."""

    def __init__(self, listeners: Iterable[Listener] = ()) -> None:
        self.all: list[Listener] = list(listeners)

    def add(self, listener: Listener) -> None:
        self.all.append(listener)

    def remove(self, listener: Listener) -> None:
        self.all.remove(listener)

    def on_study_start(self, study: StudyInfo) -> None:
        for x in self.all:
            x.on_study_start(study)

    def on_round_start(self, study: StudyInfo, round: Round) -> None:
        for x in self.all:
            x.on_round_start(study, round)

    def on_run_end(self, study: StudyInfo, run: RunDir, state: str, detail: str | None) -> None:
        for x in self.all:
            x.on_run_end(study, run, state, detail)

    def on_run_stopped(self, study: StudyInfo, run: RunDir, why: str) -> None:
        for x in self.all:
            x.on_run_stopped(study, run, why)

    def on_decision(self, study: StudyInfo, decisions: Sequence[dict[str, Any]]) -> None:
        for x in self.all:
            x.on_decision(study, decisions)

    def on_round_end(self, study: StudyInfo, round: Round) -> None:
        for x in self.all:
            x.on_round_end(study, round)

    def on_message(self, study: StudyInfo, text: str) -> None:
        for x in self.all:
            x.on_message(study, text)

    def on_study_end(self, study: StudyInfo, outcome: Outcome) -> None:
        for x in self.all:
            x.on_study_end(study, outcome)

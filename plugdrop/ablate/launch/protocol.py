"""What a launcher is: it starts jobs that each train one run, and says how each job ended; the
study driver (:mod:`plugdrop.ablate.study.jobs`) does the rest (the queue, the limit of jobs
at once, retries, waiting for runs another process trains, the outcome) the same way for every
launcher."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import Fault
from ..outcome import Ending, RunResult
from ..runs import RunDir
from .options import LaunchOptions

if TYPE_CHECKING:
    from ..config import AblationConfig
    from ..programs import Program
    from ..progress import Progress
    from ..train import Dist

__all__ = ["Ending", "Job", "JobEnd", "LaunchContext", "Launcher", "View"]


@dataclass(frozen=True)
class JobEnd:
    """How a job ended: its :class:`~plugdrop.ablate.outcome.Ending`; ``error`` says why for
    :attr:`~plugdrop.ablate.outcome.Ending.LOST` (one line,
    also a failed run's error), ``detail`` goes to ``failed.json``; ``fault`` is the job's
    :class:`Fault` when it could send it."""

    status: Ending
    error: str | None = None
    detail: str = ""
    fault: Fault | None = None

    @classmethod
    def of(cls, result: RunResult) -> JobEnd:
        """The end of a job that returned ``result``; a stopped run's job ended before its run
        did (:attr:`~plugdrop.ablate.outcome.Ending.ENDED`)."""
        if result.status is Ending.STOPPED:
            return cls(Ending.ENDED)
        fault = result.as_fault()
        return cls(result.status, result.error if fault is None else str(fault), fault=fault)


class Job(Protocol):
    """One run in training somewhere."""

    run: RunDir
    #: how messages name it: ``job 1234``, ``process 5678``
    label: str
    #: where its logs are, for messages
    logs: str

    def poll(self) -> JobEnd | None:
        """``None`` while it runs, else how it ended."""

    def cancel(self) -> None:
        """Stop it (the driver was interrupted)."""


@dataclass
class LaunchContext:
    """What the driver hands a launcher: the checked config (the round's), the folder of the
    runs it prepared, this
    process's place, the program that trains the runs (prepared: plugdrop's trainer holds the
    data loaded for the dry step, on which the local launcher trains), the progress bars, and
    the options."""

    cfg: AblationConfig
    out: Path
    d: Dist
    program: Program
    progress: Progress
    options: LaunchOptions


class View(Protocol):
    """How the driver shows progress: the local launcher's bars, or the watch of run folders
    of the others (:mod:`.monitor`)."""

    def ended(self, rd: RunDir, status: str, detail: str | None) -> None: ...

    def update(self, active: Sequence[RunDir]) -> None:
        """Called every turn of the driver's loop; ``active``: the runs whose job is out."""

    def message(self, text: str) -> None: ...

    def close(self) -> None: ...


class Launcher(Protocol):
    """Where the runs of an ablation train. A launcher module defines one class with this
    interface and registers it (:mod:`.registry`)."""

    name: str

    def start(self, ctx: LaunchContext, todo: list[RunDir]) -> View:
        """Prepare to train ``todo`` (an executor, a cluster connection, signal handlers);
        returns how the driver shows their progress. Called once per round of the study."""

    def capacity(self) -> int:
        """How many jobs may run at once."""

    def submit(self, runs: list[RunDir]) -> list[Job]:
        """Start one job per run (one call may submit many at once, a Slurm array)."""

    def wait(self, jobs: list[Job], timeout: float) -> None:
        """Block until one of ``jobs`` may have ended, at most ``timeout`` seconds."""

    def close(self) -> None:
        """Undo :meth:`start`, once after the last round (always called)."""

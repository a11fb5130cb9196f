"""What a launcher is: it starts jobs that each train one run, and says how each job ended; the
driver (:mod:`.driver`) does the rest (the queue, the limit of jobs at once, retries, waiting for
runs another process trains, the report, the outcome) the same way for every launcher."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import Fault
from ..execute import BUSY, FAILED, FAULT, FINISHED
from ..runs import RunDir
from .options import LaunchOptions

if TYPE_CHECKING:
    from ..config import AblationConfig
    from ..data import DataSets
    from ..progress import Progress
    from ..train import Dist

__all__ = ["BUSY", "ENDED", "FAILED", "FAULT", "FINISHED", "Job", "JobEnd", "LOST",
           "LaunchContext", "Launcher", "View"]

#: a job ended without saying more (killed, preempted, stopped): the run folder tells whether
#: its run finished; if not, the driver submits it again (``--max-retries``)
ENDED = "ended"
#: the launcher gave up on the job (Ray's own retries spent): the run is marked failed
LOST = "lost"


@dataclass(frozen=True)
class JobEnd:
    """How a job ended: ``status`` is :data:`FINISHED`, :data:`FAILED`, :data:`BUSY` (another
    process trains its run), :data:`ENDED`, :data:`LOST` or :data:`FAULT` (the environment
    failed: the driver stops the ablation); ``error`` says why for :data:`LOST` (one line),
    ``detail`` goes to ``failed.json``; ``fault`` is the job's :class:`Fault` when it could
    send it."""

    status: str
    error: str | None = None
    detail: str = ""
    fault: Fault | None = None


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
    """What the driver hands a launcher: the checked config, the folder it prepared, this
    process's place, the data (loaded for the dry step; the local launcher trains on it), the
    progress bars, and the options."""

    cfg: AblationConfig
    out: Path
    d: Dist
    data: DataSets
    progress: Progress
    options: LaunchOptions


class View(Protocol):
    """How the driver shows progress: the local launcher's bars, or the watch of run folders
    of the others (:mod:`.monitor`)."""

    def ended(self, rd: RunDir, status: str, detail: str | None) -> None: ...

    def update(self) -> None: ...

    def message(self, text: str) -> None: ...

    def close(self) -> None: ...


class Launcher(Protocol):
    """Where the runs of an ablation train. A launcher module defines one class with this
    interface and registers it (:mod:`.registry`)."""

    name: str

    def start(self, ctx: LaunchContext, todo: list[RunDir]) -> View:
        """Prepare to train ``todo`` (an executor, a cluster connection, signal handlers);
        returns how the driver shows their progress. Called once per round of an adaptive
        ablation (once for a fixed one)."""

    def capacity(self) -> int:
        """How many jobs may run at once."""

    def submit(self, runs: list[RunDir]) -> list[Job]:
        """Start one job per run (one call may submit many at once, a Slurm array)."""

    def wait(self, jobs: list[Job], timeout: float) -> None:
        """Block until one of ``jobs`` may have ended, at most ``timeout`` seconds."""

    def close(self) -> None:
        """Undo :meth:`start`, once after the last round (always called)."""

"""What trains the runs of an ablation, seen from the runner: a :class:`Program`. plugdrop's own
training loop is one (:mod:`.builtin`, the default), a training program of the user's is the
other (:mod:`.external`, ``program:``); :func:`~plugdrop.ablate.execute.execute`, the design,
the launchers and the report do not know which one trained a run: the run folder says how it
ended.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .. import runs

if TYPE_CHECKING:
    from ..config import AblationConfig
    from ..progress import Progress
    from ..train import Dist, StopFlag

__all__ = ["Program", "RunFailed"]


class RunFailed(Exception):
    """A run's program failed, and its failure is recorded in its ``failed.json`` already;
    the message is the one line the table and the driver show."""


class Program(Protocol):
    """How the runs of one ablation train. Made for its config by
    :func:`~plugdrop.ablate.programs.program_of`, in the driver and in every job."""

    #: how messages name what trains: ``"plugdrop's trainer"``, ``"the program"``
    name: str
    #: the config whose runs it trains
    cfg: AblationConfig

    def prepare(self, d: Dist, only: Collection[str] | None = None) -> None:
        """In the driver, before any run trains (on every rank under torchrun): check all a
        run needs (plugdrop's trainer: the data, a dry step per variant; a program: that it
        can start, and the variants' spec files). ``only``: the variants this invocation may
        train (a ``--shard``'s), what a check costing a start per variant is limited to;
        ``None``: every variant.

        Raises:
            ConfigError: a mistake, one line.
        """

    def manifest(self, d: Dist) -> dict[str, Any]:
        """What ``ablation.json`` records of it beside the config: what trains (``trains``,
        the report's header), the report's sections its runs supply (``sections``: plugdrop's
        trainer its accuracy per epoch, calibration, drop fractions, Grad-CAM; a program what
        it logged), and ``{"data": ...}`` or ``{"program": ...}``."""

    @property
    def files(self) -> Sequence[str]:
        """The data's files, recorded when the ablation starts and compared on resume."""

    def headline(self, d: Dist) -> tuple[str, str]:
        """How the driver's first line names what trains (``resnet18 on digits (...)``) and
        what each run is (`` x 10 epochs on cpu``)."""

    def check_folder(self, out: Path) -> None:
        """In the driver, holding the ablation folder ``out``: refuse it, in one line, for a
        reason of the program's own (a program's ablation continued from another folder).

        Raises:
            ConfigError: the folder cannot be continued so.
        """

    def load(self, out: Path, d: Dist) -> None:
        """In the process that trains a run, once it holds the run: what the run needs here
        (the data, checked against the ablation's; the program found on this machine).

        Raises:
            ConfigError: a mistake met only here (data or program missing on this machine).
        """

    def rejudges(self, rd: runs.RunDir) -> bool:
        """Whether the run, asked for again, is only judged again, not trained (a program's
        run whose judging alone failed, judged under other settings now): what the header
        line does not count among the runs to train."""

    def begin(self, rd: runs.RunDir, launcher: str) -> Any:
        """On rank 0, holding the run's lock: choose where the run starts (a checkpoint, or
        whether it resumes at all) and record the attempt in ``attempts.jsonl``; returns that
        start, handed to :meth:`train` (on every rank)."""

    def train(self, rd: runs.RunDir, d: Dist, start: Any, *, stop: StopFlag,
              progress: Progress, lock: runs.RunLock) -> None:
        """Train the run to its end (``done.json``) from ``start``; ``lock`` is the run's,
        held by this process.

        Raises:
            Stopped: a signal stopped it (the run is started again later, resuming).
            RunFailed: it failed, recorded in ``failed.json``.
            ConfigError: a mistake met now. Fault: the environment failed.
            Exception: a crash of plugdrop's trainer (recorded by the caller).
        """

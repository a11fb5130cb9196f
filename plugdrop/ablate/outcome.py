"""How one attempt of a run ended, as a value: :class:`RunResult` (finished, failed with its
error, busy, stopped by a signal, or stopped by a fault of the environment), and how an attempt
or the job that made it ended, in one word: :class:`Ending` (the one type the launchers, the
driver and the jobs share; a job that ended without saying more is :attr:`Ending.ENDED`, one
the launcher gave up is :attr:`Ending.LOST`). A job hands its result to its driver as JSON
(:meth:`RunResult.to_json`: submitit's and Ray's return values) or as its exit status
(:meth:`RunResult.exit_status`, :class:`~plugdrop.ablate.errors.Exit`), and the driver reads it
back without parsing strings.

    >>> r = RunResult.stopped(15)
    >>> RunResult.from_json(r.to_json()) == r, r.exit_status()
    (True, 143)
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .errors import Exit, Fault
from .runs.state import RunState

__all__ = ["Ending", "RunResult"]


class Ending(str, Enum):
    """How an attempt of a run, or the job that made it, ended (its finished and failed are
    the run's own :class:`~plugdrop.ablate.runs.RunState` words)."""

    #: its run finished (the run folder says so too)
    FINISHED = RunState.FINISHED.value
    #: its run failed (recorded in the run folder)
    FAILED = RunState.FAILED.value
    #: another process trains the run now: the driver waits for that one
    BUSY = "busy"
    #: a signal stopped it at a step boundary, with a checkpoint there
    STOPPED = "stopped"
    #: the environment failed (a full disk, data that vanished); the run is not marked failed
    FAULT = "fault"
    #: the job ended without saying more (killed, preempted): the run folder tells whether its
    #: run finished; if not, the driver submits it again (``--max-retries``)
    ENDED = "ended"
    #: the launcher gave up on the job (Ray's own retries spent): the run is marked failed
    LOST = "lost"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RunResult:
    """How :func:`~plugdrop.ablate.execute.execute` (or a job) ended.

    Attributes:
        status: the :class:`Ending`.
        error: a failed run's error, on one line.
        signum: the signal that stopped it (:attr:`Ending.STOPPED`; ``None``: not known).
        fault: the message of a fault (:attr:`Ending.FAULT`).
        fix: what to do about the fault before ``--resume``.
    """

    status: Ending
    error: str | None = None
    signum: int | None = None
    fault: str | None = None
    fix: str | None = None

    # -- the ways a run ends --------------------------------------------------------------

    @classmethod
    def finished(cls) -> RunResult:
        return cls(Ending.FINISHED)

    @classmethod
    def failed(cls, error: str) -> RunResult:
        return cls(Ending.FAILED, error=error)

    @classmethod
    def busy(cls) -> RunResult:
        return cls(Ending.BUSY)

    @classmethod
    def stopped(cls, signum: int | None = None) -> RunResult:
        return cls(Ending.STOPPED, signum=signum)

    @classmethod
    def faulted(cls, e: Fault) -> RunResult:
        return cls(Ending.FAULT, fault=str(e), fix=e.fix)

    # -- what it means --------------------------------------------------------------------

    def as_fault(self) -> Fault | None:
        """The :class:`Fault` of a :attr:`Ending.FAULT` result, else ``None``."""
        if self.status is not Ending.FAULT:
            return None
        return Fault(self.fault or "a job stopped on a fault of the environment", self.fix)

    def exit_status(self) -> int:
        """The exit status of a worker that ended so (:class:`~plugdrop.ablate.errors.Exit`;
        stopped: 128 + the signal)."""
        if self.status is Ending.STOPPED:
            return Exit.SIGNAL + (self.signum or signal.SIGTERM)
        return {Ending.FINISHED: Exit.OK, Ending.FAILED: Exit.FAILED, Ending.FAULT: Exit.FAULT,
                Ending.BUSY: Exit.BUSY}[self.status]

    # -- across a process -------------------------------------------------------------------

    def to_json(self) -> str:
        """The result as a JSON object (the fields that are set)."""
        fields: dict[str, Any] = {"status": self.status.value}
        for k in ("error", "signum", "fault", "fix"):
            if getattr(self, k) is not None:
                fields[k] = getattr(self, k)
        return json.dumps(fields)

    @classmethod
    def from_json(cls, text: Any) -> RunResult | None:
        """The result :meth:`to_json` wrote; ``None`` for anything else (a job that returned
        no result, or not this form)."""
        try:
            data = json.loads(text) if isinstance(text, (str, bytes)) else None
            status = Ending(data.get("status")) if isinstance(data, dict) else None
        except ValueError:  # not JSON, or no status of ours
            return None
        if data is None or status is None:
            return None

        def field(key: str, kind: type) -> Any:
            value = data.get(key)
            return value if isinstance(value, kind) and not isinstance(value, bool) else None

        return cls(status, field("error", str), field("signum", int), field("fault", str),
                   field("fix", str))

    @classmethod
    def from_exit(cls, code: int, folder: str) -> RunResult:
        """What a worker's exit status ``code`` says, the run folder's status ``folder``
        (``finished``, ``failed``, ``incomplete``) deciding first: a finished or failed run is
        so whatever the exit; else a fault (:attr:`Exit.FAULT`), busy (:attr:`Exit.BUSY`), or
        stopped (by signal ``code - 128`` when above 128)."""
        if folder in (Ending.FINISHED, Ending.FAILED):
            return cls(Ending(folder))
        if code == Exit.FAULT:
            return cls(Ending.FAULT)
        if code == Exit.BUSY:
            return cls.busy()
        return cls.stopped(code - Exit.SIGNAL if code > Exit.SIGNAL else None)

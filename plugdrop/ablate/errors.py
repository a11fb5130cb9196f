"""The error types of the ablation runner: a user's mistake, and a fault of the environment.

A :class:`ConfigError` is met before (or instead of) training and fixed by changing the config,
the data or the command; the CLI exits with status 2. A :class:`Fault` is the environment
failing under a correct ablation (a full disk, a read-only or vanished folder): the ablation
stops at once, starts no other run, marks no run failed, and continues with ``--resume`` once
the fault is removed; the CLI exits with status :attr:`Exit.FAULT` (74, ``EX_IOERR``).

Every message is one line (:func:`one_line`, the library's).
"""

from __future__ import annotations

from enum import IntEnum

import plugdrop as pd

__all__ = ["ConfigError", "DataGone", "Exit", "Fault", "StorageError", "one_line"]

one_line = pd.errors.one_line


class Exit(IntEnum):
    """The exit statuses of ``plugdrop ablate``, ``plugdrop report`` and a worker."""

    #: every run finished (a worker: its run finished, or had finished already)
    OK = 0
    #: a run failed (``plugdrop ablate``: the others still trained)
    FAILED = 1
    #: a mistake in the config, data, command or folder (a :class:`ConfigError`: one line)
    MISTAKE = 2
    #: a fault of the environment stopped it (:class:`Fault`; ``EX_IOERR``)
    FAULT = 74
    #: a worker found its run trained by another process now (``EX_TEMPFAIL``)
    BUSY = 75
    #: a signal stopped it: the status is 128 + the signal's number (130 for SIGINT)
    SIGNAL = 128


class ConfigError(ValueError):
    """A user mistake in an ablation: config, data, model or output folder. The message is one
    line naming the place and the fix; ``before``: the lines of other mistakes found with it
    (each of its own cause), which the command line prints first."""

    before: tuple[str, ...] = ()


class Fault(RuntimeError):
    """A fault of the environment under a correct ablation. The message is one line naming
    the place and what happened; ``fix`` says what to do before continuing with
    ``--resume`` (the CLI adds the command)."""

    fix = "then continue"

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        if fix is not None:
            self.fix = fix

    def __reduce__(self) -> tuple[type, tuple[str, str]]:  # survives a worker's pickling
        return type(self), (str(self), self.fix)


class StorageError(Fault):
    """Writing a file of the ablation failed: no space left, over quota, a read-only file
    system, no permission, or over the file-size limit. Raised by the runner's one writer
    (:mod:`plugdrop.ablate.runs.files`), never half-written: the previous file is intact."""


class DataGone(Fault):
    """The data vanished or became unreadable while a run trained (a dropped network mount,
    a deleted folder)."""

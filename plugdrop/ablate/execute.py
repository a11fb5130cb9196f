"""Executing one run: what the local launcher and every launcher's job
(``python -m plugdrop.ablate.worker``) call, so that a run trains the same way wherever it
trains, whatever trains it (plugdrop's trainer or a ``program:``: a
:class:`~plugdrop.ablate.programs.Program`).

A run is claimed through its lock (another process training it: ``busy``; finished meanwhile:
``finished``), every start is recorded in ``runs/<id>/attempts.jsonl``, the program chooses where
it resumes (plugdrop's trainer: the last checkpoint that loads, a torn one passed over with a
warning; a program: ``PLUGDROP_RESUME=1``), trains it, and it ends with ``done.json``, or
``failed.json`` when it crashed (the crash is recorded, not raised). A fault of the environment
(a full disk, data that vanished) is raised, not recorded: the run is not the problem.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import torch

from . import runs
from .config import AblationConfig
from .errors import ConfigError, Fault, one_line
from .outcome import RunResult
from .programs import Program, RunFailed, load_data, train_run, workers_for
from .progress import Progress
from .train import Dist, StopFlag, Stopped, on_rank0

__all__ = ["execute", "load_data", "train_run", "workers_for"]


def _claim(rd: runs.RunDir, lock: runs.RunLock, launcher: str, program: Program
           ) -> tuple[RunResult | None, Any]:
    """Take the run's lock, let the program choose where the run starts and record the
    attempt (``(None, start)``); finished or busy instead when the run needs no training here
    (shards and launcher jobs share one ``--out``)."""
    if rd.status == runs.FINISHED:
        return RunResult.finished(), None
    if not lock.try_acquire():
        return RunResult.busy(), None
    try:
        if rd.status == runs.FINISHED:
            lock.release()
            return RunResult.finished(), None
        start = program.begin(rd, launcher)
    except BaseException:
        lock.release()
        raise
    return None, start


def execute(cfg: AblationConfig, rd: runs.RunDir, d: Dist, program: Program, *,
            stop: StopFlag, progress: Progress, launcher: str,
            out: Path | None = None) -> RunResult:
    """Claim, train (or resume) and mark one run, in this process (under torchrun, in all of
    its processes together).

    Args:
        program: what trains it (:func:`~plugdrop.ablate.programs.program_of`); what it needs
            here is loaded once the run is claimed (a job turned away loads nothing).
        stop: the flag SIGINT / SIGTERM set; polled between steps (passed on to a program).
        progress: where the run's epochs (a program's metric lines) are reported.
        launcher: recorded in ``attempts.jsonl``.
        out: the ablation folder (a job checks its data against the ablation's there);
            default: the one holding the run.

    Returns:
        finished, busy (another process trains it) or failed: a crash of the run (an
        out-of-memory error, a NaN loss, a program that failed) is recorded in
        ``failed.json`` and returned as :meth:`~plugdrop.ablate.outcome.RunResult.failed`
        with its error on one line.

    Raises:
        Stopped: a signal stopped the run (plugdrop's trainer: at a step boundary, its state
            checkpointed there; a program: passed the signal, it exited).
        KeyboardInterrupt: a second Ctrl-C.
        ConfigError: a user mistake met only now (an unreadable image, a program missing on
            this machine, say).
        Fault: the environment failed (a full disk, data that vanished): the run is not
            marked failed; its finished epochs are kept.
    """
    lock = runs.RunLock(rd)
    claimed, start = on_rank0(d, lambda: _claim(rd, lock, launcher, program))
    if claimed is not None:
        return claimed
    try:
        program.load(out if out is not None else rd.path.parent.parent, d)
        program.train(rd, d, start, stop=stop, progress=progress, lock=lock)
        return RunResult.finished()
    except (ConfigError, Fault, Stopped):
        raise
    except RunFailed as e:  # the program recorded its failure; the others go on
        return RunResult.failed(str(e))
    except Exception as e:  # a crashing run is recorded; the others go on
        if d.main:
            rd.failed(e, rd.current_epoch(), traceback.format_exc())
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return RunResult.failed(one_line(e, typed=True, limit=300))
    finally:
        if d.main:
            lock.release()

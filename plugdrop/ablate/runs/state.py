"""The one run-state type: a run (variant x seed, one folder) is finished, failed or
incomplete, and its folder says which: finished iff ``done.json`` exists, failed iff
``failed.json`` exists, else incomplete (running, stopped, or not started). Every part of
plugdrop that asks how a run stands (the study driver, the strategies, the launchers' views, the
report) gets a :class:`RunState`; how one attempt or its job ended is
:class:`~plugdrop.ablate.outcome.Ending`, whose finished and failed are these."""

from __future__ import annotations

from enum import Enum

__all__ = ["FAILED", "FINISHED", "INCOMPLETE", "RunState"]


class RunState(str, Enum):
    """How a run stands, as its folder says (equal to its word: ``FINISHED == "finished"``)."""

    FINISHED = "finished"
    FAILED = "failed"
    INCOMPLETE = "incomplete"

    def __str__(self) -> str:
        return self.value


FINISHED, FAILED, INCOMPLETE = RunState.FINISHED, RunState.FAILED, RunState.INCOMPLETE

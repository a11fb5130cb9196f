"""What one invocation of a study did: :class:`Outcome`, the same for every strategy."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Outcome"]


@dataclass
class Outcome:
    """What a study's invocation did.

    Attributes:
        finished, failed: the runs it trained that finished, that failed (ids).
        stopped: the signal that stopped it (0: none; 2 for Ctrl-C).
        at_once: stopped at once (a second Ctrl-C), not at a step boundary with a checkpoint.
        rounds: the rounds it started.
        result: what the strategy says at the end (an adaptive design's last replay, a
            search's last step), ``None`` for a grid.
        report: the summary the report listener wrote at the end (its table), when it could.
        report_fault: why it could not (the folder takes no file), when that was the reason.
        files: every file the listeners wrote at the end.
    """

    finished: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    stopped: int = 0
    at_once: bool = False
    rounds: int = 0
    result: Any = None
    report: Any = None
    report_fault: Exception | None = None
    files: list[Path] = field(default_factory=list)

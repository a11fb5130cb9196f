"""When a run checkpoints in the middle of an epoch: every ``checkpoint_every`` (a duration on
this process's clock, or a number of optimizer steps counted over the whole run, so that a
resumed run keeps the same steps), besides every epoch end and every stopping signal."""

from __future__ import annotations

import time

from ..config import Interval

__all__ = ["Cadence"]


class Cadence:
    """The ``checkpoint_every`` setting, asked after each optimizer step.

    >>> c = Cadence(Interval(500, "steps"))
    >>> c.due(step=1000), c.due(step=1001)
    ((True, False), (False, False))
    """

    def __init__(self, every: Interval | bool) -> None:
        """``every``: the config's ``checkpoint_every`` (``False``: at epoch ends only)."""
        self.steps = every.steps if isinstance(every, Interval) else 0
        self.seconds = every.seconds if isinstance(every, Interval) else 0.0
        self.last = time.monotonic()

    def due(self, step: int, now: float | None = None) -> tuple[bool, bool]:
        """``(by_steps, by_time)``: whether global step ``step`` is a checkpoint's by the
        step count (the same on every rank), and whether this process's clock says one is due
        (agreed between ranks by the caller)."""
        by_steps = bool(self.steps) and step % self.steps == 0
        now = time.monotonic() if now is None else now
        by_time = bool(self.seconds) and now - self.last >= self.seconds
        return by_steps, by_time

    def done(self) -> None:
        """A checkpoint was written now: the clock starts again."""
        self.last = time.monotonic()

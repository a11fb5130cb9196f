"""Stopping a run cleanly: SIGINT, SIGTERM (a scheduler's preemption, ``kill``), SIGUSR1 and
SIGUSR2 (Slurm's ``--signal`` before a time limit) set a flag that the training loop polls
between optimizer steps (on every rank at once under torchrun); the run then checkpoints where
it is and stops. A second SIGINT interrupts at once."""

from __future__ import annotations

import signal
from typing import Any

import torch
import torch.distributed as dist

from .distributed import Dist

__all__ = ["SIGNALS", "StopFlag", "Stopped"]

#: the signals that stop a run at the next step boundary, with a checkpoint
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


class Stopped(Exception):
    """A signal (:data:`SIGNALS`) stopped the run at a step boundary, after its checkpoint."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopFlag:
    """The signals of :data:`SIGNALS` set a flag the training loop polls between steps; a
    second SIGINT interrupts at once. ``install`` remembers the handlers it replaced
    (:attr:`previous`), which a launcher may call after the run stopped (submitit's requeue)."""

    def __init__(self) -> None:
        self.signum = 0
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.signum and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def install(self, signals: tuple[int, ...] = SIGNALS) -> None:
        for s in signals:
            try:
                self._old[s] = signal.signal(s, self._handler)
            except ValueError:  # not the main thread
                pass

    @property
    def previous(self) -> dict[int, Any]:
        """The handlers :meth:`install` replaced, by signal number."""
        return dict(self._old)

    def restore(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}

    def poll(self, d: Dist, due: bool = False, every: int = 1, i: int = 0) -> tuple[int, bool]:
        """The signal that arrived (0: none) and whether a checkpoint is ``due``, agreed by
        every rank under torchrun (each ``every``-th call, ``i`` counting them; in between,
        ``(0, False)``): any rank's signal or ``due`` counts for all."""
        if d.active:
            if i % every:
                return 0, False
            flag = torch.tensor([float(self.signum), float(due)], device=d.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            self.signum, due = int(flag[0].item()), bool(flag[1].item())
        return self.signum, due

    def check(self, d: Dist, every: int = 1, i: int = 0) -> None:
        """Raise :class:`Stopped` if a signal arrived (on any rank, under torchrun)."""
        if d.active:
            if i % every:
                return
            flag = torch.tensor([float(self.signum)], device=d.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            self.signum = int(flag.item())
        if self.signum:
            raise Stopped(self.signum)

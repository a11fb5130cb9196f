"""Stopping a run cleanly: SIGINT / SIGTERM set a flag that the training loop polls between
optimizer steps (on every rank at once under torchrun); a second SIGINT interrupts at once."""

from __future__ import annotations

import signal
from typing import Any

import torch
import torch.distributed as dist

from .distributed import Dist

__all__ = ["StopFlag", "Stopped"]


class Stopped(Exception):
    """SIGINT or SIGTERM asked the ablation to stop at the next step boundary."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopFlag:
    """SIGINT / SIGTERM set a flag the training loop polls between steps; a second SIGINT
    interrupts at once."""

    def __init__(self) -> None:
        self.signum = 0
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.signum and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def install(self) -> None:
        for s in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[s] = signal.signal(s, self._handler)
            except ValueError:  # not the main thread
                pass

    def restore(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}

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

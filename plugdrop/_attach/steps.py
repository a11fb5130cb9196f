"""A callback after every optimizer step of the process (any ``torch.optim`` optimizer, bound
or not): what the run's receipt uses to record a training's first steps as they happen
(:mod:`plugdrop._receipt`). The only process-wide hook plugdrop registers, here with the
others."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.optim.optimizer import register_optimizer_step_post_hook

__all__ = ["StepCallback", "after_optimizer_steps"]


class StepCallback:
    """The global optimizer step post-hook: calls ``fn()`` after each step."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def __call__(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.fn()


def after_optimizer_steps(fn: Callable[[], None]) -> Any:
    """Call ``fn()`` after every ``optimizer.step()`` of this process; returns the handle
    whose ``remove()`` stops it."""
    return register_optimizer_step_post_hook(StepCallback(fn))

"""Schedules: numeric settings that change with the training step (and with the layer).

A schedule is a callable ``step -> value``. Steps are counted by the :class:`~plugdrop.Handle`
that owns the transform (``handle.step()`` or ``handle.bind(optimizer)``), starting at 0 when the
transform is attached. Every schedule holds its end value after its last step.

Any callable ``step -> float`` can be used where a schedule is expected; the classes here add a
readable ``repr`` (shown by :func:`plugdrop.summary`) and pickle cleanly, which a lambda does not.

A :class:`LayerValue` (:func:`by_depth`) makes a setting vary with the position of each layer in
the selection it is attached to, optionally times a step schedule:
``by_depth(0.0, 0.1) * linear(0.0, 1.0, steps=1000)``.
"""

from .depth import LayerRule, LayerValue, ScheduleLike, by_depth
from .step import (
    Constant,
    Cosine,
    Linear,
    Piecewise,
    Schedule,
    Warmup,
    as_schedule,
    cosine,
    linear,
    piecewise,
    warmup,
)

__all__ = [
    "Schedule",
    "Constant",
    "Linear",
    "Cosine",
    "Piecewise",
    "Warmup",
    "linear",
    "cosine",
    "piecewise",
    "warmup",
    "as_schedule",
    "LayerValue",
    "by_depth",
    "ScheduleLike",
    "LayerRule",
]

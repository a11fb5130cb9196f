"""Step schedules: values that change with the training step (:func:`linear`, :func:`cosine`,
:func:`piecewise`, :func:`warmup`), and :func:`as_schedule` for numbers and callables."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import Union

from ..errors import SettingError

__all__ = ["Constant", "Cosine", "FromCallable", "Linear", "Piecewise", "Product", "Schedule",
           "StepLike", "Warmup", "as_schedule", "cosine", "linear", "number", "piecewise", "steps_count",
           "warmup"]


def number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise SettingError(f"{name} must be finite, got {value}")
    return value


def steps_count(name: str, value: object, *, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < 0 or (value == 0 and not allow_zero):
        low = "0" if allow_zero else "1"
        raise SettingError(f"{name} must be >= {low}, got {value}")
    return value


class Schedule:
    """Base class of schedules: ``schedule(step) -> float`` for integer ``step >= 0``."""

    def __call__(self, step: int) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def values(self) -> list[float]:
        """The values that bound this schedule (its extremes), used to validate it up front."""
        return [self(0)]


class Constant(Schedule):
    """The same value at every step."""

    def __init__(self, value: float) -> None:
        self.value = number("value", value)

    def __call__(self, step: int) -> float:
        return self.value

    def values(self) -> list[float]:
        return [self.value]

    def __repr__(self) -> str:
        return f"{self.value:g}"


class _Ramp(Schedule):
    """From ``start`` (step 0) to ``end`` (step ``steps``) along :meth:`_shape`, then ``end``."""

    name = ""

    def __init__(self, start: float, end: float, steps: int) -> None:
        self.start = number("start", start)
        self.end = number("end", end)
        self.steps = steps_count("steps", steps)

    @staticmethod
    def _shape(t: float) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, step: int) -> float:
        t = min(max(step, 0), self.steps) / self.steps
        return self.start + (self.end - self.start) * self._shape(t)

    def values(self) -> list[float]:
        return [self.start, self.end]

    def __repr__(self) -> str:
        return f"{self.name}({self.start:g}, {self.end:g}, steps={self.steps})"


class Linear(_Ramp):
    """Linear ramp from ``start`` (step 0) to ``end`` (step ``steps``), then ``end``."""

    name = "linear"

    @staticmethod
    def _shape(t: float) -> float:
        return t


class Cosine(_Ramp):
    """Half-cosine ramp from ``start`` (step 0) to ``end`` (step ``steps``), then ``end``."""

    name = "cosine"

    @staticmethod
    def _shape(t: float) -> float:
        return (1.0 - math.cos(math.pi * t)) / 2.0


class Piecewise(Schedule):
    """Values given at milestones: ``{step: value}``.

    With ``interpolation="constant"`` (default) each value holds from its step until the next
    milestone; with ``"linear"`` values are interpolated between milestones. Before the first
    milestone the first value is used; after the last, the last.
    """

    def __init__(self, points: Mapping[int, float], interpolation: str = "constant") -> None:
        if not isinstance(points, Mapping):
            raise TypeError(
                f"piecewise() takes a mapping {{step: value}}, got {type(points).__name__}"
            )
        if not points:
            raise SettingError("piecewise() needs at least one {step: value} pair")
        if interpolation not in ("constant", "linear"):
            raise SettingError(
                f"interpolation must be 'constant' or 'linear', got {interpolation!r}"
            )
        items = sorted(
            (steps_count("a piecewise step", k, allow_zero=True), number(f"the value at step {k}", v))
            for k, v in points.items()
        )
        self.steps = [k for k, _ in items]
        self.points = [v for _, v in items]
        self.interpolation = interpolation

    def __call__(self, step: int) -> float:
        steps, vals = self.steps, self.points
        if step <= steps[0]:
            return vals[0]
        for i in range(1, len(steps)):
            if step < steps[i]:
                if self.interpolation == "constant":
                    return vals[i - 1]
                t = (step - steps[i - 1]) / (steps[i] - steps[i - 1])
                return vals[i - 1] + (vals[i] - vals[i - 1]) * t
        return vals[-1]

    def values(self) -> list[float]:
        return list(self.points)

    def __repr__(self) -> str:
        body = ", ".join(f"{k}: {v:g}" for k, v in zip(self.steps, self.points))
        extra = "" if self.interpolation == "constant" else ", interpolation='linear'"
        return f"piecewise({{{body}}}{extra})"


class Warmup(Schedule):
    """Linear warm-up from ``start`` to ``schedule(0)`` over ``steps`` steps, then ``schedule``.

    The wrapped schedule begins after the warm-up: at step ``steps + k`` the value is
    ``schedule(k)``.
    """

    def __init__(self, schedule: Schedule | Callable[[int], float], steps: int,
                 start: float = 0.0) -> None:
        self.schedule = as_schedule(schedule)
        self.steps = steps_count("warmup steps", steps, allow_zero=True)
        self.start = number("warmup start", start)

    def __call__(self, step: int) -> float:
        if step < self.steps:
            return self.start + (self.schedule(0) - self.start) * step / self.steps
        return self.schedule(step - self.steps)

    def values(self) -> list[float]:
        return [self.start, *self.schedule.values()]

    def __repr__(self) -> str:
        return f"warmup({self.schedule!r}, steps={self.steps}, start={self.start:g})"


class FromCallable(Schedule):
    """Adapter for a user callable ``step -> value``."""

    def __init__(self, fn: Callable[[int], float]) -> None:
        self.fn = fn

    def __call__(self, step: int) -> float:
        return number(f"the value of schedule {self.fn!r} at step {step}", self.fn(step))

    def values(self) -> list[float]:
        return [self(0)]

    def __repr__(self) -> str:
        return getattr(self.fn, "__name__", repr(self.fn))


class Product(Schedule):
    """``schedule(step) * factor``: a step schedule scaled by a constant."""

    def __init__(self, schedule: Schedule, factor: float) -> None:
        self.schedule, self.factor = schedule, number("factor", factor)

    def __call__(self, step: int) -> float:
        return self.schedule(step) * self.factor

    def values(self) -> list[float]:
        return [v * self.factor for v in self.schedule.values()]

    def __repr__(self) -> str:
        return f"{self.schedule!r} * {self.factor:g}"


def as_schedule(value: object) -> Schedule:
    """Turn a number, a :class:`Schedule` or a callable ``step -> value`` into a Schedule.

    Raises:
        TypeError: for anything else (a string, a tensor, ``None``...).
    """
    if isinstance(value, Schedule):
        return value
    if getattr(value, "varies_with_layer", False):  # a LayerValue (.depth)
        raise TypeError(f"{value!r} varies with the layer: it is a transform setting, not a "
                        f"step schedule")
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return Constant(float(value))
    if callable(value) and not isinstance(value, type):
        return FromCallable(value)
    raise TypeError(
        f"expected a number, a plugdrop schedule or a callable step -> value, "
        f"got {type(value).__name__} {value!r}"
    )


#: a step schedule, a number (constant) or a callable ``step -> value``
StepLike = Union[float, int, Schedule, Callable[[int], float]]


def _wrap(schedule: Schedule, warmup_steps: int) -> Schedule:
    return Warmup(schedule, warmup_steps) if warmup_steps else schedule


def linear(start: float, end: float, steps: int, *, warmup: int = 0) -> Schedule:
    """Linear ramp from ``start`` to ``end`` over ``steps`` steps, holding ``end`` afterwards.

    Args:
        start: value at step 0 (after the warm-up, if any).
        end: value at step ``steps`` and every later step.
        steps: length of the ramp, >= 1.
        warmup: optional number of steps before the ramp during which the value rises
            linearly from 0 to ``start``.

    Example::

        >>> s = linear(0.0, 0.1, steps=100)
        >>> s(0), s(50), s(100), s(10_000)
        (0.0, 0.05, 0.1, 0.1)
    """
    return _wrap(Linear(start, end, steps), steps_count("warmup", warmup, allow_zero=True))


def cosine(start: float, end: float, steps: int, *, warmup: int = 0) -> Schedule:
    """Half-cosine ramp from ``start`` to ``end`` over ``steps`` steps, then ``end``.

    ``warmup`` works as in :func:`linear`.
    """
    return _wrap(Cosine(start, end, steps), steps_count("warmup", warmup, allow_zero=True))


def piecewise(points: Mapping[int, float], *, interpolation: str = "constant",
              warmup: int = 0) -> Schedule:
    """Values at milestones, e.g. ``piecewise({0: 0.0, 1000: 0.05, 5000: 0.1})``.

    Each value holds from its step on (``interpolation="constant"``), or values are joined
    linearly (``"linear"``). ``warmup`` works as in :func:`linear`.
    """
    return _wrap(Piecewise(points, interpolation), steps_count("warmup", warmup, allow_zero=True))


def warmup(schedule: StepLike, steps: int, *, start: float = 0.0) -> Schedule:
    """Prefix ``schedule`` (or a constant) with a linear warm-up from ``start`` over ``steps``."""
    return Warmup(as_schedule(schedule), steps, start)

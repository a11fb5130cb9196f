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

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import Union

from .errors import SettingError

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
]


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise SettingError(f"{name} must be finite, got {value}")
    return value


def _steps(name: str, value: object, *, allow_zero: bool = False) -> int:
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
        self.value = _number("value", value)

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
        self.start = _number("start", start)
        self.end = _number("end", end)
        self.steps = _steps("steps", steps)

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
            (_steps("a piecewise step", k, allow_zero=True), _number(f"the value at step {k}", v))
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
        self.steps = _steps("warmup steps", steps, allow_zero=True)
        self.start = _number("warmup start", start)

    def __call__(self, step: int) -> float:
        if step < self.steps:
            return self.start + (self.schedule(0) - self.start) * step / self.steps
        return self.schedule(step - self.steps)

    def values(self) -> list[float]:
        return [self.start, *self.schedule.values()]

    def __repr__(self) -> str:
        return f"warmup({self.schedule!r}, steps={self.steps}, start={self.start:g})"


class _Callable(Schedule):
    """Adapter for a user callable ``step -> value``."""

    def __init__(self, fn: Callable[[int], float]) -> None:
        self.fn = fn

    def __call__(self, step: int) -> float:
        return _number(f"the value of schedule {self.fn!r} at step {step}", self.fn(step))

    def values(self) -> list[float]:
        return [self(0)]

    def __repr__(self) -> str:
        return getattr(self.fn, "__name__", repr(self.fn))


class _Product(Schedule):
    """``schedule(step) * factor``: a step schedule scaled by a constant."""

    def __init__(self, schedule: Schedule, factor: float) -> None:
        self.schedule, self.factor = schedule, _number("factor", factor)

    def __call__(self, step: int) -> float:
        return self.schedule(step) * self.factor

    def values(self) -> list[float]:
        return [v * self.factor for v in self.schedule.values()]

    def __repr__(self) -> str:
        return f"{self.schedule!r} * {self.factor:g}"


LayerRule = Callable[[int, int, str], float]


class LayerValue:
    """A setting that takes its own value at each attached layer, times a step schedule.

    ``rule(index, count, name)`` gives the factor of the layer at position ``index`` among the
    ``count`` layers of the selection (``named_modules()`` order), called ``name``; the value
    of that layer at step ``s`` is ``rule(index, count, name) * schedule(s)``. Built by
    :func:`by_depth`; multiply it by a schedule (or a number) to vary it with the step too.
    """

    def __init__(self, rule: LayerRule, schedule: Schedule | None = None,
                 text: str | None = None, by: str = "layer") -> None:
        if by not in ("layer", "parent"):
            raise SettingError(f"by must be 'layer' or 'parent', got {by!r}")
        self.by = by
        if not callable(rule):
            raise TypeError(f"a per-layer rule must be a callable (index, count, name) -> "
                            f"value, got {type(rule).__name__} {rule!r}")
        self.rule = rule
        self.schedule: Schedule = schedule if schedule is not None else Constant(1.0)
        self.text = text if text is not None else getattr(rule, "__name__", repr(rule))

    def positions(self, layers: list[str]) -> list[tuple[int, int]]:
        """``(index, count)`` of each layer: its own position, or (``by="parent"``) that of
        its parent module among the parents of the selection (so timm's two branches of a
        block share their block's value)."""
        if self.by == "layer":
            return [(i, len(layers)) for i in range(len(layers))]
        parents = [name.rsplit(".", 1)[0] if "." in name else "" for name in layers]
        order = list(dict.fromkeys(parents))
        return [(order.index(p), len(order)) for p in parents]

    def at(self, index: int, count: int, name: str) -> float:
        """The depth factor of one layer (without the step schedule)."""
        return _number(f"the value of {self.text} at layer {name!r} ({index + 1} of {count})",
                       self.rule(index, count, name))

    def bounds(self) -> list[float]:
        """Depth factors known before attaching (checked up front); empty for a callable."""
        rule = self.rule
        return [rule.start, rule.end] if isinstance(rule, _Linear) else []

    def __mul__(self, other: object) -> LayerValue:
        if isinstance(other, LayerValue):
            raise TypeError("two per-layer values cannot be multiplied; multiply one by a "
                            "step schedule")
        if isinstance(other, numbers.Real) and not isinstance(other, bool):
            schedule: Schedule = _Product(self.schedule, float(other))
        elif isinstance(other, Schedule) or callable(other):
            if not isinstance(self.schedule, Constant) or self.schedule.value != 1.0:
                raise TypeError(f"{self!r} already varies with the step")
            schedule = as_schedule(other)
        else:
            return NotImplemented
        return LayerValue(self.rule, schedule, self.text, self.by)

    __rmul__ = __mul__

    def __repr__(self) -> str:
        if isinstance(self.schedule, Constant) and self.schedule.value == 1.0:
            return self.text
        return f"{self.text} * {self.schedule!r}"


class _Linear:
    """timm's rule: ``start + (end - start) * index / (count - 1)`` (``start`` for one layer),
    i.e. ``torch.linspace(start, end, count)``."""

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = _number("start", start), _number("end", end)

    def __call__(self, index: int, count: int, name: str) -> float:
        if count <= 1:
            return self.start
        return self.start + (self.end - self.start) * index / (count - 1)


def by_depth(start: float | LayerRule, end: float | None = None, *,
             by: str = "layer") -> LayerValue:
    """A setting that varies with the depth of each attached layer.

    ``by_depth(start, end)`` rises linearly from ``start`` at the first selected layer to
    ``end`` at the last, in ``named_modules()`` order (timm's stochastic depth rule,
    ``torch.linspace(start, end, count)``; with one layer, ``start``). ``by_depth(rule)`` takes
    any picklable callable ``rule(index, count, name) -> value``. With ``by="parent"``, the
    position is that of each layer's parent module among the parents of the selection: timm's
    ``blocks.*.drop_path1`` and ``drop_path2`` then share their block's rate, exactly as timm's
    ``drop_path_rate`` gives them. Multiply by a step schedule to vary the values with the
    step as well::

        >>> p = pd.by_depth(0.0, 0.1) * pd.linear(0.0, 1.0, steps=1000)
        >>> h = pd.attach(vit, "blocks.*.mlp", pd.DropPath(p))

    :func:`plugdrop.summary` shows each layer's own current value; ``transform.values()`` gives
    the last layer's (``transform.values(layer)`` any one's). Every layer's value is checked
    at attach and at each step, like any setting; handles' state dicts resume them; under
    ``torch.compile`` each layer reads its own 0-dim tensor, so the model stays one graph.

    Raises:
        TypeError: ``start``/``end`` not real numbers, or ``end`` missing (or given with a
            callable).
        SettingError: ``by`` other than ``"layer"`` or ``"parent"``.
    """
    if callable(start):
        if end is not None:
            raise TypeError("by_depth(rule) takes a callable alone; by_depth(start, end) "
                            "takes two numbers")
        return LayerValue(start, by=by)
    if end is None:
        raise TypeError("by_depth(start, end) needs both numbers (or one callable "
                        "(index, count, name) -> value)")
    rule = _Linear(start, end)
    extra = "" if by == "layer" else f", by={by!r}"
    return LayerValue(rule, text=f"by_depth({rule.start:g}, {rule.end:g}{extra})", by=by)


ScheduleLike = Union[float, int, Schedule, Callable[[int], float], LayerValue]


def as_schedule(value: ScheduleLike) -> Schedule:
    """Turn a number, a :class:`Schedule` or a callable ``step -> value`` into a Schedule.

    Raises:
        TypeError: for anything else (a string, a tensor, ``None``...).
    """
    if isinstance(value, Schedule):
        return value
    if isinstance(value, LayerValue):
        raise TypeError(f"{value!r} varies with the layer: it is a transform setting, not a "
                        f"step schedule")
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return Constant(value)
    if callable(value) and not isinstance(value, type):
        return _Callable(value)
    raise TypeError(
        f"expected a number, a plugdrop schedule or a callable step -> value, "
        f"got {type(value).__name__} {value!r}"
    )


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
    return _wrap(Linear(start, end, steps), _steps("warmup", warmup, allow_zero=True))


def cosine(start: float, end: float, steps: int, *, warmup: int = 0) -> Schedule:
    """Half-cosine ramp from ``start`` to ``end`` over ``steps`` steps, then ``end``.

    ``warmup`` works as in :func:`linear`.
    """
    return _wrap(Cosine(start, end, steps), _steps("warmup", warmup, allow_zero=True))


def piecewise(points: Mapping[int, float], *, interpolation: str = "constant",
              warmup: int = 0) -> Schedule:
    """Values at milestones, e.g. ``piecewise({0: 0.0, 1000: 0.05, 5000: 0.1})``.

    Each value holds from its step on (``interpolation="constant"``), or values are joined
    linearly (``"linear"``). ``warmup`` works as in :func:`linear`.
    """
    return _wrap(Piecewise(points, interpolation), _steps("warmup", warmup, allow_zero=True))


def warmup(schedule: ScheduleLike, steps: int, *, start: float = 0.0) -> Schedule:
    """Prefix ``schedule`` (or a constant) with a linear warm-up from ``start`` over ``steps``."""
    return Warmup(as_schedule(schedule), steps, start)

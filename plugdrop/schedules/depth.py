"""Values that change with the layer: :class:`LayerValue` and :func:`by_depth` (timm's
stochastic-depth rule on any selection), times a step schedule."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Union

from ..errors import SettingError
from .step import Constant, Product, Schedule, as_schedule, number

__all__ = ["LayerRule", "LayerValue", "LinearRule", "ScheduleLike", "by_depth"]


LayerRule = Callable[[int, int, str], float]


class LayerValue:
    """A setting that takes its own value at each attached layer, times a step schedule.

    ``rule(index, count, name)`` gives the factor of the layer at position ``index`` among the
    ``count`` layers of the selection (``named_modules()`` order), called ``name``; the value
    of that layer at step ``s`` is ``rule(index, count, name) * schedule(s)``. Built by
    :func:`by_depth`; multiply it by a schedule (or a number) to vary it with the step too.
    """

    #: what :func:`~.step.as_schedule` recognizes it by (a setting, not a step schedule)
    varies_with_layer = True

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
        return number(f"the value of {self.text} at layer {name!r} ({index + 1} of {count})",
                       self.rule(index, count, name))

    def bounds(self) -> list[float]:
        """Depth factors known before attaching (checked up front); empty for a callable."""
        rule = self.rule
        return [rule.start, rule.end] if isinstance(rule, LinearRule) else []

    def __mul__(self, other: object) -> LayerValue:
        if isinstance(other, LayerValue):
            raise TypeError("two per-layer values cannot be multiplied; multiply one by a "
                            "step schedule")
        if isinstance(other, numbers.Real) and not isinstance(other, bool):
            schedule: Schedule = (Constant(self.schedule.value * float(other))
                                  if isinstance(self.schedule, Constant)
                                  else Product(self.schedule, float(other)))
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


class LinearRule:
    """timm's rule: ``start + (end - start) * index / (count - 1)`` (``start`` for one layer),
    i.e. ``torch.linspace(start, end, count)``."""

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = number("start", start), number("end", end)

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
    rule = LinearRule(start, end)
    extra = "" if by == "layer" else f", by={by!r}"
    return LayerValue(rule, text=f"by_depth({rule.start:g}, {rule.end:g}{extra})", by=by)


#: what a numeric setting takes: a number, a step schedule, a callable ``step -> value``, or a
#: per-layer value
ScheduleLike = Union[float, int, Schedule, Callable[[int], float], LayerValue]

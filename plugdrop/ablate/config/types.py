"""The typed values of the settings table: what a check returns and the config carries to the
trainer, the launchers and the report, so that no room parses a setting again.

Each type holds a setting's meaning (``Interval.steps``, ``SeedPlan.looks()``), and
:meth:`~Typed.plain` gives the value as the resolved config (``ablation.json``, the config
hash) writes it: ``Interval`` -> ``"500steps"``, ``SeedPlan`` -> ``{min, max, step, first}``.
Their defaults are the settings table's (:mod:`.schema`): stated here once, shown by the
reference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["CompileSpec", "GradCamSpec", "Interval", "SeedPlan", "Typed", "to_plain"]


@runtime_checkable
class Typed(Protocol):
    """A typed setting value (the types here, :class:`~.metrics.Metric`, the data's
    ``DataSpec``): :meth:`plain` is its JSON form in the resolved config."""

    def plain(self) -> Any: ...


def to_plain(value: Any) -> Any:
    """``value`` as JSON-able data: a :class:`Typed` as its :meth:`~Typed.plain` form, tuples
    as lists, mappings as dicts (recursively)."""
    if isinstance(value, Typed) and not isinstance(value, type):
        return value.plain()
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    return value


_EVERY = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|secs|m|min|mins|h|hour|hours|steps?)")
_UNIT = {"s": "s", "sec": "s", "secs": "s", "m": "min", "min": "min", "mins": "min", "h": "h",
         "hour": "h", "hours": "h", "step": "steps", "steps": "steps"}
_SECONDS = {"s": 1, "min": 60, "h": 3600}


@dataclass(frozen=True)
class Interval:
    """How often a run checkpoints in the middle of an epoch (``checkpoint_every``): every
    ``steps`` optimizer steps, or every ``seconds`` of this process's clock (one of them is
    set).

    Attributes:
        amount: the number as written (``30`` of ``30min``).
        unit: ``"s"``, ``"min"``, ``"h"`` or ``"steps"``.
    """

    amount: float
    unit: str

    #: what :meth:`parse` takes, for error messages
    WHAT = ("a duration such as 30min, 90s or 2h, a number of optimizer steps such as 500steps, "
            "or false (at epoch ends only)")

    @classmethod
    def parse(cls, text: str) -> Interval:
        """``"30min"``, ``"90 s"``, ``"2h"``, ``"500steps"`` -> an interval.

        Raises:
            ValueError: what it must be instead (:attr:`WHAT`; a fraction of a step: a whole
                number of steps).
        """
        found = _EVERY.fullmatch(text.strip().lower())
        if found is None or float(found.group(1)) <= 0:
            raise ValueError(cls.WHAT)
        unit = _UNIT[found.group(2)]
        number = found.group(1)
        if unit == "steps" and not number.isdigit():
            raise ValueError("a whole number of steps, such as 500steps")
        return cls(int(number) if number.isdigit() else float(number), unit)

    @property
    def steps(self) -> int:
        """Optimizer steps between two checkpoints (0: the interval is a duration)."""
        return int(self.amount) if self.unit == "steps" else 0

    @property
    def seconds(self) -> float:
        """Seconds between two checkpoints (0: the interval counts steps)."""
        return 0.0 if self.unit == "steps" else float(self.amount) * _SECONDS[self.unit]

    def plain(self) -> str:
        return f"{self.amount:g}{self.unit}" if isinstance(self.amount, float) \
            else f"{self.amount}{self.unit}"

    def __str__(self) -> str:
        return self.plain()


@dataclass(frozen=True, kw_only=True)
class SeedPlan:
    """The seeds of an adaptive design (``seeds: {min, max, step, first}``): seeds ``first,
    first + 1, ...``; ``min`` of them in the first round, ``step`` more per round while a
    variant is undecided, ``max`` at most."""

    min: int = 3
    max: int
    step: int = 1
    first: int = 0

    #: the keys and their smallest values, in the order checks and messages name them
    KEYS = {"min": 2, "max": 2, "step": 1, "first": 0}

    def seeds(self) -> list[int]:
        """Every seed a run may use: ``first .. first + max - 1``."""
        return [self.first + i for i in range(self.max)]

    def looks(self) -> list[int]:
        """The number of seeds after each round: ``min, min + step, ..., max``."""
        return list(range(self.min, self.max, self.step)) + [self.max]

    def plain(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class CompileSpec:
    """``compile:``: ``torch.compile`` the model with ``backend`` (and ``mode``, torch's default
    when ``None``)."""

    backend: str = "inductor"
    mode: str | None = None

    def plain(self) -> dict[str, Any]:
        return {"backend": self.backend, "mode": self.mode}


@dataclass(frozen=True)
class GradCamSpec:
    """``gradcam:`` set to a layer or ``{layer, images}``: overlays of :attr:`count` validation
    images at :attr:`where` (``"auto"``: the last regularized layer with a map of at least
    4x4). ``None`` fields were not given (the resolved config leaves them out)."""

    layer: str | None = None
    images: int | None = None

    #: images shown when ``images`` is not given
    IMAGES = 8

    @property
    def where(self) -> str:
        """The layer, or ``"auto"``."""
        return self.layer if self.layer is not None else "auto"

    @property
    def count(self) -> int:
        """How many validation images are overlaid."""
        return self.images if self.images is not None else self.IMAGES

    def plain(self) -> dict[str, Any]:
        return {k: v for k, v in (("layer", self.layer), ("images", self.images))
                if v is not None}

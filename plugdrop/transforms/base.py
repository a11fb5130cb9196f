"""The two kinds of transform objects and their scheduled settings.

- :class:`ForwardTransform`: maps an activation to a regularized activation, in training mode.
- :class:`GradientTransform`: maps a gradient to a modified gradient; forward values untouched.
- :class:`CoordinatedTransform`: a forward transform spread over several layers that decides
  once per forward of the model (which layer mixes, how much) and mixes the targets through
  its handle's ``loss`` (:class:`plugdrop.ManifoldMixup`).

Transforms know nothing about hooks: :func:`plugdrop.attach` hangs them on a model's layers.
Numeric settings take a number or a schedule (:mod:`plugdrop.schedules`); the current value is
held as a Python float (eager mode, no device synchronization) and as a 0-dim float32 tensor per
device, updated in place at every step (read under ``torch.compile``, so a changing value does
not recompile). Settings are checked when set, so the hot path does not check them again.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from .. import _checks
from .._device import PerDevice
from ..errors import SettingError
from ..schedules import LayerValue, Schedule, ScheduleLike, as_schedule

__all__ = ["Transform", "ForwardTransform", "GradientTransform", "CoordinatedTransform"]


class Site(Protocol):
    """Where a transform is being attached, as the attachment layer tells it (the transform
    checks itself against it in :meth:`Transform._check_layers`)."""

    #: the bare model (inside its DDP / compile / checkpoint wrappers)
    model: Any
    #: ``"output"``, ``"input"`` or ``"params"``
    where: str

    def residual_branches(self) -> list[str] | None:
        """The model's residual branches, found now or earlier (``None``: unknown, e.g. a
        model torch.fx cannot trace and that was never run through
        :func:`plugdrop.residual_branches`)."""

    def on_residual_branch(self, name: str) -> bool:
        """Whether a module ``name`` acts as a residual branch (is one, is inside one, or
        reaches one through identities)."""

Check = Callable[[str, object], float]


class _Setting:
    """A scheduled numeric setting: its schedule, and its current value on the host and as a
    tensor per device; for a per-layer value (:func:`plugdrop.by_depth`), one of each per
    attached layer too."""

    def __init__(self, name: str, value: ScheduleLike, check: Check):
        self.name = name
        self.check = check
        self.depth: LayerValue | None = None
        self.factors: dict[str, float] = {}       # layer -> its depth factor
        self.layers: dict[str, PerDevice] = {}    # layer -> its current value
        if isinstance(value, LayerValue):
            self.depth = value
            value = value.schedule
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            check(name, value)
        try:
            self.schedule: Schedule = as_schedule(value)
        except TypeError as e:
            raise TypeError(f"{name}: {e}") from None
        # a callable per-layer rule is checked layer by layer when attached
        factors = [1.0] if self.depth is None else self.depth.bounds()
        for v in self.schedule.values():
            for f in factors:
                check(f"{name} (schedule {self.describe()})", f * v)
        first = 1.0 if self.depth is None else self.depth.at(0, 1, "")
        self.current = PerDevice(check(name, first * self.schedule(0)))

    def describe(self) -> str:
        return repr(self.depth) if self.depth is not None else repr(self.schedule)

    @property
    def value(self) -> float:
        return self.current.value

    def bind(self, layers: list[str], step: int) -> None:
        """Give each of ``layers`` its own value (a per-layer setting only)."""
        if self.depth is None:
            return
        self.factors = {name: self.depth.at(i, n, name)
                        for (i, n), name in zip(self.depth.positions(layers), layers)}
        self.layers = {name: PerDevice(0.0) for name in layers}
        self.set_step(step)

    def set_step(self, step: int) -> None:
        t = self.schedule(step)
        where = f"at step {step} of {self.describe()}"
        for layer, current in self.layers.items():
            current.fill(self.check(f"{self.name} of layer {layer!r} {where}",
                                    self.factors[layer] * t))
        last = self.factors[next(reversed(self.factors))] if self.factors else (
            1.0 if self.depth is None else self.depth.at(0, 1, ""))
        self.current.fill(self.check(f"{self.name} {where}", last * t))

    def of(self, layer: str | None) -> PerDevice:
        """The value holder of ``layer`` (the shared one for a setting not per layer)."""
        return self.layers.get(layer, self.current) if layer is not None else self.current


class Transform:
    """Base class of all transforms.

    A subclass declares its numeric settings in ``super().__init__(name=(value, check))``
    (``check(name, number) -> float`` raises on a bad value) and implements :meth:`apply`, which receives ``x`` and the current value of each setting as a
    keyword argument (a float, or a 0-dim tensor under ``torch.compile``). ``transform(x)``
    applies it with the current values, as in training; :attr:`step_count` counts the steps
    its schedules took (0 at construction).
    """

    def __init__(self, **settings: tuple[ScheduleLike, Check]) -> None:
        self._settings: dict[str, _Setting] = {}
        self._step = 0
        self._attached = False
        for name, (value, check) in settings.items():
            self._setting(name, value, check)

    def _setting(self, name: str, value: ScheduleLike, check: Check) -> None:
        self._settings[name] = _Setting(name, value, check)

    @property
    def step_count(self) -> int:
        """Number of schedule steps taken so far."""
        return self._step

    def values(self, layer: str | None = None) -> dict[str, float]:
        """The current value of each numeric setting, e.g. ``{"p": 0.05}``: at ``layer`` for
        per-layer settings (:func:`plugdrop.by_depth`; default: the last attached layer)."""
        return {k: s.of(layer).value for k, s in self._settings.items()}

    def __getattr__(self, name: str) -> Any:
        settings = self.__dict__.get("_settings")
        if settings is not None and name in settings:
            return settings[name].value
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _options(self) -> dict[str, Any]:
        """Non-default non-numeric options, for ``repr``."""
        return {}

    def __repr__(self) -> str:
        parts = [f"{k}={s.describe()}" for k, s in self._settings.items()]
        parts += [f"{k}={v!r}" for k, v in self._options().items()]
        return f"{type(self).__name__}({', '.join(parts)})"

    def apply(self, x: torch.Tensor, *args: Any, **values: Any) -> torch.Tensor:  # pragma: no cover
        """Transform ``x`` with the given setting values. Subclasses implement it."""
        raise NotImplementedError

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.apply(x, **self._values(x.device))

    # -- used by the attachment layer --------------------------------------------------------

    def _values(self, device: torch.device, layer: str | None = None
                ) -> dict[str, float | torch.Tensor]:
        """Each setting's current value at ``layer``: the float in eager mode (no device
        synchronization), the 0-dim tensor on ``device`` while ``torch.compile`` traces (a
        graph input: a changing value does not recompile)."""
        if torch.compiler.is_compiling():
            return {k: s.of(layer).get(device) for k, s in self._settings.items()}
        return {k: s.of(layer).value for k, s in self._settings.items()}

    def _bind_layers(self, layers: list[str]) -> None:
        """Called by attach with the selected layers: per-layer settings get their values."""
        for s in self._settings.values():
            s.bind(layers, self._step)

    def _set_step(self, step: int) -> None:
        """Move every schedule to ``step`` (checking the values it reaches)."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise SettingError(f"step must be an int >= 0, got {step!r}")
        for s in self._settings.values():
            s.set_step(step)
        self._step = step

    def _check_layers(self, layers: Sequence[tuple[str, Any]], site: Site) -> None:
        """Called by attach with every selected ``(name, module)`` before anything is hung:
        raise on what cannot work there (nothing is attached then), warn on what looks wrong,
        or read settings the model knows. Default: nothing."""

    def _prepare(self, device: torch.device) -> None:
        """Create the value tensors on ``device`` ahead of a compiled forward."""
        for s in self._settings.values():
            s.current.get(device)
            for current in s.layers.values():
                current.get(device)


def _floating(transform: Transform, x: torch.Tensor) -> None:
    _checks.floating(type(transform).__name__, x, "activations",
                     "token ids or masks? select a layer whose output is float, or pick the "
                     "element with element=")


class ForwardTransform(Transform):
    """A transform of activations, applied in training mode only.

    Raises ``TypeError`` on integer or boolean tensors (they cannot be dropped and rescaled).
    """

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        _floating(self, x)
        return super().__call__(x)

    def _at(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        """Apply at the named layer (the attachment calls this)."""
        _floating(self, x)
        return self.apply(x, **self._values(x.device, layer))

    def _check_input(self, x: torch.Tensor) -> None:
        """Raise ``TypeError`` on an integer or boolean ``x`` (for subclasses that override
        :meth:`_at`)."""
        _floating(self, x)

    def _eager_at(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        """:meth:`_at` when the caller knows that ``torch.compile`` is not tracing (the
        attachment's hooks, in eager mode): a transform may override it with a shorter path
        computing the same thing; the settings are then read as floats with
        :meth:`_eager_value`."""
        return self._at(layer, x)

    def _eager_value(self, name: str, layer: str) -> float:
        """The current float value of setting ``name`` at ``layer`` (eager mode)."""
        return self._settings[name].of(layer).value

    def _check_layers(self, layers: Sequence[tuple[str, Any]], site: Site) -> None:
        """On outputs, :meth:`_check_layer` of every selected layer."""
        if site.where == "output":
            for name, module in layers:
                self._check_layer(name, module, site.model)

    def _check_layer(self, name: str, module: object, model: object = None) -> None:
        """Called for each selected module (and the bare model) when attached to outputs:
        raise early on what cannot work there, or read settings the model knows."""


class GradientTransform(Transform):
    """A transform of gradients; forward values are left bit-identical.

    ``apply`` receives the gradient of an activation; :meth:`_apply_param` (default: ``apply``)
    the gradient of one parameter tensor (``where="params"``). A transform with
    ``params_only = True`` needs the parameter itself and attaches with ``where="params"`` only.
    Called on a tensor (``transform(g)``), it raises ``TypeError`` on an integer or boolean one.
    """

    params_only = False

    def __call__(self, g: torch.Tensor) -> torch.Tensor:
        """Transform ``g`` as the gradient of an activation; ``TypeError`` on an integer or
        boolean ``g``."""
        _checks.floating(type(self).__name__, g, "gradients",
                         "pass the gradient of a floating-point tensor")
        return super().__call__(g)

    def _apply_param(self, g: torch.Tensor, *args: Any, **values: Any) -> torch.Tensor:
        return self.apply(g, **values)

    def _call_param(self, g: torch.Tensor, layer: str | None = None,
                    param: torch.Tensor | None = None) -> torch.Tensor:
        return self._apply_param(g, **self._values(g.device, layer))

    def _call_grad(self, g: torch.Tensor, layer: str | None = None) -> torch.Tensor:
        """Transform the gradient of an activation of ``layer`` (the attachment calls it)."""
        return self.apply(g, **self._values(g.device, layer))


class CoordinatedTransform(ForwardTransform):
    """A forward transform over several layers that decides once per forward of the model.

    The attachment calls :meth:`_begin` before each training forward of the model (a pre-hook
    on its root), then :meth:`_at` at every attached layer; :meth:`_end_eval` before an eval
    forward. After a forward, ``last`` is ``None`` (nothing mixed) or a dict with ``"lam"``,
    ``"index"``, ``"layer"`` and ``"order"`` (a number that grows with every mix in the
    process, so that the mixes of several coordinated transforms in one forward are known in the
    order they happened), which the handle (:class:`plugdrop.MixupHandle`) reports and
    :func:`plugdrop.mixed_loss` uses to mix the targets. A subclass records a mix with
    :meth:`_mixed`.
    """

    def __init__(self, **settings: tuple[ScheduleLike, Check]) -> None:
        super().__init__(**settings)
        self.layers: list[str] = []
        self.last: dict[str, Any] | None = None

    def _bind_layers(self, layers: list[str]) -> None:
        super()._bind_layers(layers)
        self.layers = list(layers)

    def _begin(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _end_eval(self) -> None:
        self.last = None

    def _mixed(self, lam: float | torch.Tensor, index: torch.Tensor, layer: str) -> None:
        """Record that this forward mixed ``x`` with ``x[index]`` at ``layer``, keeping a
        weight ``lam`` of the original."""
        self.last = {"lam": lam, "index": index, "layer": layer, "order": next(_MIXES)}


#: The order of mixes in this process, across coordinated transforms.
_MIXES = itertools.count()

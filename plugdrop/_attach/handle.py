"""Handles: what :func:`plugdrop.attach` returns, to step, bind, save and remove one
attachment (in the spirit of ``torch.utils.hooks.RemovableHandle`` and
``torch.nn.utils.parametrize``)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from ..errors import SettingError
from ..transforms import CoordinatedTransform, Transform
from . import _registry
from ._hooks import BeginHook
from ._registry import Registered

__all__ = ["Handle", "MixupHandle", "NeverFiredWarning", "mixed_loss"]

#: Optimizer steps after which a bound handle checks that every layer's hook ran.
CHECK_AFTER_STEPS = 3


class NeverFiredWarning(UserWarning):
    """Some layers of an attachment never ran their transform in the first training steps:
    the regularizer is silently absent there."""


def _cause(layer: str, module: Any) -> str:
    if "attn_drop" in layer or "attn" in type(module).__name__.lower():
        return (f"{layer!r}: likely fused attention (timm's fused_attn / "
                f"F.scaled_dot_product_attention never calls attn_drop)")
    return f"{layer!r}"


class Handle:
    """What :func:`attach` returns: the attachment of one transform to a set of layers.

    Attributes:
        layers: the selected layer names, in ``named_modules()`` order.
        transform: the attached transform.
        where: ``"output"``, ``"input"`` or ``"params"``.

    Use it as a context manager to remove the attachment at the end of a block. Its schedules
    advance with :meth:`step` or, after :meth:`bind`, on every optimizer step.
    """

    def __init__(self, transform: Transform, where: str, layers: list[str],
                 hooks: list[Registered]):
        self.transform = transform
        self.where = where
        self.layers = layers
        self._hooks = hooks
        self._bound: RemovableHandle | None = None
        self._fire_checked = False

    @property
    def attached(self) -> bool:
        """``True`` until :meth:`remove` (or :func:`detach`) took the attachment off."""
        return any(_registry.has_hook(r.module, r.hook) for r in self._hooks)

    def remove(self) -> None:
        """Take every hook of this attachment off and unbind the optimizer. Idempotent; the
        step count and :attr:`calls` stay as they were."""
        removed = sum(_registry.remove(r) for r in self._hooks)
        if removed:
            _registry.invalidate_compiled()
        self.unbind()
        self.transform._attached = False

    def __enter__(self) -> "Handle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    @property
    def step_count(self) -> int:
        """Steps taken since attach (or since the last :meth:`load_state_dict`)."""
        return self.transform.step_count

    def step(self, n: int = 1) -> None:
        """Advance the schedules by ``n`` steps (``n >= 0``)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise SettingError(f"step(n) takes an int n >= 0, got {n!r}")
        self.transform._set_step(self.transform.step_count + n)

    def bind(self, optimizer: torch.optim.Optimizer) -> "Handle":
        """Step the schedules after every ``optimizer.step()``; returns ``self``.

        Binding again replaces the previous binding; :meth:`remove` unbinds. A step that
        a ``GradScaler`` skips (inf/NaN gradients) does not count. A wrapper that holds the
        torch optimizer as ``.optimizer`` (Accelerate's ``AcceleratedOptimizer``, Lightning's
        ``LightningOptimizer``) is bound through to it, so the micro-batches of gradient
        accumulation, whose ``step()`` the wrapper skips, do not count either.
        """
        while isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer):
            optimizer = optimizer.optimizer  # type: ignore[attr-defined]
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"bind() takes a torch.optim.Optimizer, got {type(optimizer).__name__}")
        self.unbind()
        self._bound = optimizer.register_step_post_hook(self._on_optimizer_step)
        return self

    def unbind(self) -> None:
        """Stop stepping on optimizer steps."""
        if self._bound is not None:
            self._bound.remove()
            self._bound = None

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.step()
        if not self._fire_checked and self.step_count >= CHECK_AFTER_STEPS:
            self._fire_checked = True
            trained = any(p.grad is not None for group in optimizer.param_groups
                          for p in group["params"])
            if trained:  # a real training step (a backward ran), not a bare optimizer.step()
                self.check_fired()

    @property
    def calls(self) -> dict[str, int]:
        """Layer -> how many times the transform ran there since attach (and until
        :meth:`remove`): training forwards for a forward transform, forwards under autograd
        for a gradient transform. Counted
        without any host synchronization (a Python int in eager mode, a 0-dim tensor inside
        compiled graphs, read here)."""
        out = {name: 0 for name in self.layers}
        for r in self._hooks:
            if not isinstance(r.hook, BeginHook) and r.hook.name in out:
                out[r.hook.name] += r.hook.count()
        return out

    @property
    def never_fired(self) -> list[str]:
        """The layers whose hook never ran (see :attr:`calls`)."""
        return [name for name, n in self.calls.items() if n == 0]

    def check_fired(self) -> list[str]:
        """Warn (:class:`NeverFiredWarning`) if some layers never ran the transform, naming
        them and the likely cause; returns those layers. A handle bound to an optimizer
        checks by itself after its first training steps (3 optimizer steps)."""
        silent = self.never_fired
        if silent:
            modules = {r.hook.name: r.module for r in self._hooks}
            named = ", ".join(_cause(n, modules.get(n)) for n in silent[:8])
            more = f" and {len(silent) - 8} more" if len(silent) > 8 else ""
            warnings.warn(
                f"{type(self.transform).__name__} never ran at {len(silent)} of "
                f"{len(self.layers)} layer(s) after {self.step_count} step(s): {named}{more}. "
                f"Likely causes: the module is not called by forward (a bypassed or unused "
                f"branch, a custom forward), a fused path skips it (fused attention), or the "
                f"model was compiled before attach in another process state; check "
                f"handle.calls and plugdrop.summary(model)",
                NeverFiredWarning, stacklevel=2)
        return silent

    def state_dict(self) -> dict[str, int]:
        """``{"step": n}``: enough to resume the schedules with :meth:`load_state_dict`."""
        return {"step": self.transform.step_count}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Restore the step counter saved by :meth:`state_dict` and the values it implies."""
        if not isinstance(state, Mapping) or "step" not in state:
            raise SettingError(
                f"load_state_dict expects a mapping with key 'step' as given by state_dict(), "
                f"got {state!r}"
            )
        self.transform._set_step(state["step"])

    def __repr__(self) -> str:
        layers = ", ".join(self.layers[:4]) + (", ..." if len(self.layers) > 4 else "")
        calls = sum(self.calls.values())
        return (f"{type(self).__name__}({self.transform!r}, where={self.where!r}, "
                f"{len(self.layers)} layer(s): [{layers}], step={self.step_count}, "
                f"calls={calls})")


class MixupHandle(Handle):
    """The handle of a coordinated transform's attachment (:class:`ManifoldMixup`): what the
    last forward mixed, and the matching loss."""

    @property
    def _coordinated(self) -> CoordinatedTransform:
        t = self.transform
        if not isinstance(t, CoordinatedTransform):  # pragma: no cover - built by attach
            raise TypeError(f"MixupHandle holds a {type(t).__name__}, not a mixing transform")
        return t

    @property
    def lam(self) -> float | torch.Tensor | None:
        """The mixing weight of the last training forward (``None`` if it did not mix; a 0-dim
        tensor for :class:`PatchUp`, read without a host synchronization)."""
        last = self._coordinated.last
        return None if last is None else last["lam"]

    @property
    def index(self) -> torch.Tensor | None:
        """The batch permutation of the last forward (``None`` if it did not mix)."""
        last = self._coordinated.last
        return None if last is None else last["index"]

    @property
    def layer(self) -> str | None:
        """The layer that mixed in the last forward (``""``: the input; ``None``: none)."""
        last = self._coordinated.last
        return None if last is None else last["layer"]

    def loss(self, criterion: Any, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``lam * criterion(logits, target) + (1 - lam) * criterion(logits, target[index])``
        for the last forward, or ``criterion(logits, target)`` if it did not mix. ``target``
        may be class indices or soft targets (probabilities), whatever ``criterion`` takes."""
        last = self._coordinated.last
        if last is None:
            return criterion(logits, target)
        lam, index = last["lam"], last["index"].to(target.device)
        return lam * criterion(logits, target) + (1.0 - lam) * criterion(logits, target[index])


def mixed_loss(handles: Iterable[Handle], criterion: Any, logits: torch.Tensor,
               target: torch.Tensor) -> torch.Tensor:
    """The loss of the last training forward with the targets mixed as every coordinated
    transform among ``handles`` (:class:`ManifoldMixup`, :class:`PatchUp`, any
    :class:`~plugdrop.transforms.CoordinatedTransform`) mixed the features.

    A forward that mixed nothing gives ``criterion(logits, target)``; one mix (weight ``lam``,
    permutation ``index``) gives ``lam * criterion(logits, target) + (1 - lam) *
    criterion(logits, target[index])``, as :meth:`MixupHandle.loss`. Several mixes in one
    forward (a ManifoldMixup and a PatchUp on one model) nest in the order they happened: each
    splits every term ``w * criterion(logits, target[j])`` into ``w * lam`` of it and
    ``w * (1 - lam)`` of ``target[j[index]]``, which is the loss of the mixed soft targets for
    any criterion linear in its target (cross-entropy, with label smoothing too).

    Args:
        handles: the handles of the model's attachments (others than mixing ones are ignored),
            e.g. those :func:`attach` returned, or :func:`handles` of a copy.
        criterion: ``criterion(logits, target) -> loss``.
        logits, target: the model's output for the batch, and its targets (class indices or
            soft targets).
    """
    mixes = sorted((h.transform.last for h in handles
                    if isinstance(h.transform, CoordinatedTransform)
                    and h.transform.last is not None), key=lambda m: m.get("order", 0))
    if not mixes:
        return criterion(logits, target)
    if len(mixes) == 1:
        lam, index = mixes[0]["lam"], mixes[0]["index"].to(target.device)
        return lam * criterion(logits, target) + (1.0 - lam) * criterion(logits, target[index])
    terms: list[tuple[Any, torch.Tensor | None]] = [(1.0, None)]
    for m in mixes:
        lam, index = m["lam"], m["index"].to(target.device)
        terms = [t for w, j in terms
                 for t in ((w * lam, j), (w * (1.0 - lam), index if j is None else j[index]))]
    parts = [w * criterion(logits, target if j is None else target[j]) for w, j in terms]
    loss = parts[0]
    for part in parts[1:]:
        loss = loss + part
    return loss

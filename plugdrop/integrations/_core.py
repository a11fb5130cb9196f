"""What both trainer callbacks do: attach a spec to the model (or one of its submodules), keep
the schedules at the trainer's optimizer step, report values, and take it all off."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch.nn as nn

import plugdrop as pd

__all__ = ["Regularizer", "RegularizeCallback", "missing_extra", "spec_arg"]


def missing_extra(framework: str, extra: str, error: ImportError) -> ImportError:
    """The one-line error of an integration whose framework is not installed."""
    return ImportError(f"plugdrop.integrations.{extra} needs {framework}, which is not "
                       f"installed ({error}); install it with: pip install 'plugdrop[{extra}]'")


class Regularizer:
    """The spec, parsed at once (mistakes fail when the callback is made, not hours later at
    the first step), and the group it attaches."""

    def __init__(self, spec: Any, module: str | None, steps: int | None, watch: Any,
                 remove_at_end: bool, source: str | None, example_input: Any = None) -> None:
        if module is not None and not isinstance(module, str):
            raise TypeError(f"module= names a submodule by its dotted name ('model', "
                            f"'backbone.encoder'), got {type(module).__name__}")
        if isinstance(steps, bool) or steps is not None and (
                not isinstance(steps, int) or steps < 1):
            raise pd.SettingError(f"steps= takes a whole number of steps >= 1 (or None: the "
                                  f"trainer's total), got {steps!r}")
        self.specs = pd.parse_spec(spec, source=source)
        self.module = module
        self.steps = steps
        self.watch_selector = watch
        self.remove_at_end = remove_at_end
        self.example_input = example_input
        self.group: pd.AttachmentGroup | None = None
        self.watch: pd.Watch | None = None
        self.pending: Mapping[str, Any] | None = None

    def plain_spec(self) -> list[dict[str, Any]]:
        """The spec as plain data (JSON, YAML), to store or recreate the callback from."""
        return [s.describe() for s in self.specs]

    def target(self, root: nn.Module) -> nn.Module:
        if self.module is None:
            return root
        try:
            return root.get_submodule(self.module)
        except AttributeError:
            names = [n for n, _ in root.named_children()]
            raise pd.SelectorError(f"module={self.module!r}: {type(root).__name__} has no such "
                                   f"submodule; its children are {', '.join(names) or 'none'}"
                                   ) from None

    def attach(self, root: nn.Module, total_steps: int | None) -> pd.AttachmentGroup:
        """Attach (once; again after :meth:`remove`) and apply a state loaded before."""
        if self.group is not None and self.group.attached:
            return self.group
        model = self.target(root)
        example = self.example_input
        if example is not None:
            device = next((p.device for p in model.parameters()), None)
            example = _to(example, device) if device is not None else example
        self.group = pd.attach_all(model, self.specs, steps=self.steps or total_steps,
                                   example_input=example)
        if self.watch_selector is not None:
            self.watch = pd.watch(model, self.watch_selector)
        if self.pending is not None:
            self.group.load_state_dict(self.pending)
            self.pending = None
        return self.group

    def sync(self, step: int) -> None:
        """Put the schedules at optimizer step ``step`` (never backwards)."""
        if self.group is not None and step > self.group.step_count:
            self.group.step(step - self.group.step_count)

    def values(self) -> dict[str, float]:
        """``plugdrop/<attachment>/<setting>`` (and ``plugdrop/watch/<layer>/<stat>``)."""
        out = {f"plugdrop/{k}": v for k, v in (self.group.values() if self.group else {}).items()}
        if self.watch is not None:
            out.update({f"plugdrop/watch/{k}": v for k, v in self.watch.as_dict(reset=True).items()})
        return out

    def state_dict(self) -> dict[str, Any]:
        if self.group is not None:
            return self.group.state_dict()
        return dict(self.pending or {})

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.group is not None and self.group.attached:
            self.group.load_state_dict(state)
        else:
            self.pending = state

    def remove(self) -> None:
        if self.group is not None:
            self.group.remove()
        if self.watch is not None:
            self.watch.remove()
            self.watch = None


def _to(value: Any, device: Any) -> Any:
    """``value`` (a tensor, or a tuple/list/dict of them) on ``device``."""
    if hasattr(value, "to") and callable(value.to):
        return value.to(device)
    if isinstance(value, Mapping):
        return {k: _to(v, device) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_to(v, device) for v in value)
    return value


def spec_arg(spec: Any) -> Any:
    """A spec as the callback keeps it: a list of mappings stays (JSON-able data), a path or
    text stays a string."""
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        return [dict(s) if isinstance(s, Mapping) else s for s in spec]
    return str(spec) if not isinstance(spec, Mapping) else dict(spec)


class RegularizeCallback:
    """What both trainers' ``Regularize`` callbacks share: the checked spec with what it
    attached, the switch for logging, and a short ``repr``."""

    def __init__(self, spec: Any, module: str | None, steps: int | None, log: bool, watch: Any,
                 remove_at_end: bool, example_input: Any, source: str | None) -> None:
        self._reg = Regularizer(spec, module, steps, watch, remove_at_end, source,
                                example_input)
        self.log = log

    @property
    def group(self) -> pd.AttachmentGroup | None:
        """The :class:`~plugdrop.AttachmentGroup` while training (``None`` before)."""
        return self._reg.group

    def __repr__(self) -> str:
        return f"Regularize({', '.join(s.label for s in self._reg.specs)})"

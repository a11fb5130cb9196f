"""What a resumed training compares: the attachments a checkpoint was saved with and those
given now, told apart by what they do, not by how they were written (``start: 0`` and
``start: 0.0``, key order, a YAML file or Python data are the same attachments)."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import plugdrop as pd

__all__ = ["ResumeWarning", "Saved", "changes", "key_fields"]


class ResumeWarning(UserWarning):
    """A training resumed from a checkpoint that does not continue the schedules exactly: the
    checkpoint was saved with other attachments than those given now (the message names both),
    or holds no state of the callback. The schedules continue at the trainer's step with the
    attachments given now; they never restart from zero."""


@dataclass(frozen=True)
class Saved:
    """A callback's state as a checkpoint holds it.

    Attributes:
        steps: the step of each attachment (empty: the trainer's step is the position).
        labels: the label of each attachment (``DropBlock@layer3.*``).
        spec: the attachments as plain data (``None``: not saved with the state).
        module: the ``module=`` they were attached to.
        total: what their schedules without ``steps:`` spanned (``None``: not saved).
    """

    steps: tuple[int, ...] = ()
    labels: tuple[str, ...] = ()
    spec: Any = None
    module: str | None = None
    total: int | None = None

    @property
    def step(self) -> int | None:
        """The step the saved schedules were at (the largest among the attachments)."""
        return max(self.steps) if self.steps else None

    @classmethod
    def read(cls, state: Any, spec: Any = None, module: str | None = None) -> "Saved | None":
        """From a callback's ``state_dict`` (``None`` if ``state`` is not one): the one this
        version saves (the group's steps with ``spec``, ``module`` and ``total_steps``), or the
        group's steps alone, as earlier versions saved them (``spec`` and ``module`` then come
        from its state key, see :func:`key_fields`)."""
        saved = state.get("attachments") if isinstance(state, Mapping) else None
        if not isinstance(saved, Sequence) or not all(
                isinstance(s, Mapping) and isinstance(s.get("step"), int) for s in saved):
            return None
        total = state.get("total_steps")
        return cls(steps=tuple(int(s["step"]) for s in saved),
                   labels=tuple(str(s.get("label", "")) for s in saved),
                   spec=state.get("spec", spec), module=state.get("module", module),
                   total=total if isinstance(total, int) and not isinstance(total, bool) else None)


def key_fields(key: str, name: str) -> tuple[Any, str | None] | None:
    """``(spec, module)`` written in a Lightning state key of callback class ``name`` (earlier
    versions wrote ``Regularize{'spec': [...], 'module': 'net'}``; this one writes the module
    and the labels), or ``None`` for another callback's key."""
    if key == name:
        return None, None
    if not key.startswith(name + "{"):
        return None
    try:
        fields = ast.literal_eval(key[len(name):])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(fields, dict):
        return None
    module = fields.get("module")
    return fields.get("spec"), module if isinstance(module, str) else None


def _one(selector: Any) -> Any:
    """A list of one selector is that selector."""
    return selector[0] if isinstance(selector, list) and len(selector) == 1 else selector


def _does(spec: pd.AttachmentSpec, total: int | None) -> str:
    """What an attachment does, for comparing and for messages: its transform as built for a
    training of ``total`` steps, and where it hangs."""
    try:
        built = repr(spec.build(total))
    except (TypeError, ValueError):  # e.g. a schedule that needs the training's length
        built = f"{spec.transform}({', '.join(f'{k}={v!r}' for k, v in spec.kwargs.items())})"
    where = "".join(f", {key}={_one(getattr(spec, key))!r}" for key, default in
                    (("exclude", None), ("where", "output"), ("element", None))
                    if getattr(spec, key) != default)
    return f"{built} on {_one(spec.layers)!r}{where}"


def changes(saved: Saved, specs: Sequence[pd.AttachmentSpec], module: str | None,
            total: int | None) -> str | None:
    """How the attachments given now (``specs`` on ``module``, schedules spanning ``total``
    steps) differ from the ``saved`` ones in what they do, on one line
    (``DropBlock@layer3.*: DropBlock(p=linear(0, 0.1, steps=100)) on 'layer3.*' ->
    DropBlock(p=linear(0, 0.2, steps=100)) on 'layer3.*'``), or ``None`` when they do the
    same. A state saved without its spec is compared by the attachments' labels."""
    parts = []
    if saved.module != module:
        parts.append(f"module={saved.module!r} -> {module!r}")
    now = [_does(s, total) for s in specs]
    labels = [s.label for s in specs]
    if saved.spec is None:
        given = pd.AttachmentGroup.labels_of(specs)
        if saved.labels and list(saved.labels) != given:
            parts.append(f"attachments {list(saved.labels)} -> {given}")
        return "; ".join(parts) or None
    try:
        old_specs = pd.parse_spec(saved.spec, source="the checkpoint's spec")
        old = [_does(s, saved.total or total) for s in old_specs]
        old_labels = [s.label for s in old_specs]
    except (TypeError, ValueError) as e:  # written by another version: compare as written
        old, old_labels = [" ".join(str(e).split())], ["the checkpoint's spec"]
    for i in range(max(len(old), len(now))):
        before = old[i] if i < len(old) else "(none)"
        after = now[i] if i < len(now) else "(none)"
        if before != after:
            label = labels[i] if i < len(labels) else old_labels[i]
            parts.append(f"{label}: {before} -> {after}")
    return "; ".join(parts) or None

"""A list of attachments as one: :func:`parse_spec` reads it (Python data, a YAML file or
text), :func:`attach_all` attaches it and returns an :class:`AttachmentGroup`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Union

import torch
import torch.nn as nn

from .._attach import Handle, Summary, mixed_loss, residual_branches, summary
from ..errors import SettingError, SpecError, one_line
from .attachment import AttachmentSpec, check_together, parse_attachment
from ._yaml import Loc, LocDict, LocList, fail, read_text, read_yaml

__all__ = ["AttachmentGroup", "SpecLike", "WATCHERS", "attach_all", "parse_spec"]

#: called with each group :func:`attach_all` makes and the spec it was given: how
#: :mod:`plugdrop.run` leaves a receipt for ``attach_all`` of a run's ``PLUGDROP_SPEC``
WATCHERS: list[Callable[["AttachmentGroup", Any], None]] = []

#: what :func:`attach_all` and :func:`parse_spec` take
SpecLike = Union[str, Path, Mapping[str, Any], Sequence[Any]]

_YAML_SUFFIXES = (".yaml", ".yml", ".json")


def _read(spec: str | Path, source: str | None) -> tuple[Any, str]:
    """A file's or a text's YAML, read with the place of every value, and its name."""
    path_like = isinstance(spec, Path) or "\n" not in spec and (
        spec.strip().endswith(_YAML_SUFFIXES) or Path(spec).is_file())
    if not path_like:
        name = source or "<spec>"
        return read_yaml(str(spec), name), name
    path = Path(spec)
    if not path.exists() and not path.is_symlink():
        raise SpecError(f"{path}: no such file; give the path of a YAML file of attachments, "
                        f"or the YAML text itself")
    text = read_text(path, "the attachments")
    return read_yaml(text, source or str(path)), source or str(path)


def parse_spec(spec: SpecLike, *, source: str | None = None) -> list[AttachmentSpec]:
    """Read and check a list of attachments without attaching anything.

    Args:
        spec: a list of attachment mappings (``{layers: 'layer3.*', transform: DropBlock, p:
            0.1, block_size: 5}``, the entries of a ``plugdrop ablate`` variant), one such
            mapping, a path to a YAML file holding either, or YAML text.
        source: the name errors give the spec (default: the file's path, ``<spec>`` for
            text, ``spec`` for Python data).

    Returns:
        The checked :class:`AttachmentSpec` of each attachment, in order.

    Raises:
        SpecError: a missing or unreadable file, text that is not YAML, anything
            :func:`~plugdrop.spec.parse_attachment` rejects, attachments that do not fit
            together; the message starts with the place (``file:line:column``, ``spec[1].p``).
    """
    if isinstance(spec, (str, Path)):
        raw, name = _read(spec, source)
    else:
        raw, name = spec, source or "spec"
    if isinstance(raw, Mapping):
        raw = LocList([raw], getattr(raw, "loc", Loc(name)))
    if raw is None or not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        raise fail(getattr(raw, "loc", None) or Loc(name),
                   f"the spec must be a list of attachments like [{{layers: 'layer3.*', "
                   f"transform: DropBlock, p: 0.1}}], got {type(raw).__name__}")
    out = []
    for i, item in enumerate(raw):
        loc = getattr(item, "loc", None) or Loc(f"{name}[{i}]")
        if isinstance(item, Mapping) and not isinstance(item, LocDict):
            item = LocDict(item, loc, {k: Loc(f"{name}[{i}].{k}") for k in item})
        out.append(parse_attachment(item, loc))
    check_together(out)
    return out


class AttachmentGroup:
    """The handles of :func:`attach_all`, used as one: bind, step, save, remove.

    Iterating gives the :class:`~plugdrop.Handle` of each attachment in the spec's order;
    ``group[i]`` is one of them. Use it as a context manager to remove everything at the end of
    a block.

    Attributes:
        model: the model the attachments hang on.
        specs: the :class:`AttachmentSpec` of each attachment.
        handles: the matching handles.
    """

    def __init__(self, model: nn.Module, specs: Sequence[AttachmentSpec],
                 handles: Sequence[Handle]):
        self.model = model
        self.specs = tuple(specs)
        self.handles = tuple(handles)

    def __len__(self) -> int:
        return len(self.handles)

    def __iter__(self) -> Iterator[Handle]:
        return iter(self.handles)

    def __getitem__(self, i: int) -> Handle:
        return self.handles[i]

    @property
    def labels(self) -> list[str]:
        """One name per attachment, ``DropBlock@layer3.*``; repeated ones end in ``#2``, ..."""
        return self.labels_of(self.specs)

    @staticmethod
    def labels_of(specs: Sequence[AttachmentSpec]) -> list[str]:
        """The :attr:`labels` a group of ``specs`` has (before attaching them)."""
        out: list[str] = []
        for s in specs:
            label, n = s.label, 2
            while label in out:
                label, n = f"{s.label}#{n}", n + 1
            out.append(label)
        return out

    @property
    def attached(self) -> bool:
        """``True`` while any of the attachments is on the model."""
        return any(h.attached for h in self.handles)

    def bind(self, optimizer: torch.optim.Optimizer) -> "AttachmentGroup":
        """Step every schedule after each ``optimizer.step()`` (see :meth:`Handle.bind`);
        returns ``self``."""
        for h in self.handles:
            h.bind(optimizer)
        return self

    def unbind(self) -> None:
        """Stop stepping on optimizer steps."""
        for h in self.handles:
            h.unbind()

    def step(self, n: int = 1) -> None:
        """Advance every schedule by ``n`` steps (an ``int >= 0``)."""
        for h in self.handles:
            h.step(n)

    @property
    def step_count(self) -> int:
        """The steps taken (the largest count among the attachments; they agree unless one
        was stepped on its own)."""
        return max((h.step_count for h in self.handles), default=0)

    def values(self) -> dict[str, float]:
        """The current value of every numeric setting, ``{"DropBlock@layer3.*/p": 0.05}``
        (per-layer settings: their mean over the layers), for logging."""
        out = {}
        for label, h in zip(self.labels, self.handles):
            per_layer = [h.transform.values(layer) for layer in h.layers] or [
                h.transform.values()]
            for k in per_layer[0]:
                out[f"{label}/{k}"] = sum(float(v[k]) for v in per_layer) / len(per_layer)
        return out

    @property
    def calls(self) -> dict[str, int]:
        """Attachment -> how many times its transform ran, over all its layers."""
        return {label: sum(h.calls.values()) for label, h in zip(self.labels, self.handles)}

    def state_dict(self) -> dict[str, Any]:
        """``{"attachments": [{"label": ..., "step": n}, ...]}``: plain data (safe to load as
        weights only, and JSON) that :meth:`load_state_dict` resumes."""
        return {"attachments": [{"label": label, "step": h.step_count}
                                for label, h in zip(self.labels, self.handles)]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the steps saved by :meth:`state_dict` (and the values they imply).

        Raises:
            SettingError: ``state`` is not such a mapping, or was saved from other attachments
                (their number or labels differ; the message lists both).
        """
        saved = state.get("attachments") if isinstance(state, Mapping) else None
        if not isinstance(saved, Sequence) or not all(
                isinstance(s, Mapping) and "step" in s for s in saved):
            raise SettingError(f"load_state_dict expects the mapping AttachmentGroup."
                               f"state_dict() gives, {{'attachments': [{{'label': ..., "
                               f"'step': n}}, ...]}}, got {state!r}")
        labels = [s.get("label") for s in saved]
        if labels != self.labels:
            raise SettingError(f"the saved state is of other attachments: saved {labels}, "
                               f"attached {self.labels}; attach the same spec before loading")
        for h, s in zip(self.handles, saved):
            h.load_state_dict({"step": s["step"]})

    def loss(self, criterion: Any, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss with the targets mixed as the group's coordinated transforms (ManifoldMixup,
        PatchUp) mixed the last forward; ``criterion(logits, target)`` when nothing mixed.
        See :func:`plugdrop.mixed_loss`."""
        return mixed_loss(self.handles, criterion, logits, target)

    @property
    def mixes(self) -> bool:
        """Whether a coordinated transform is attached (then use :meth:`loss`)."""
        return any(s.coordinated for s in self.specs)

    def summary(self) -> Summary:
        """The rows of :func:`plugdrop.summary` that belong to this group."""
        ours = {(layer, repr(h.transform)) for h in self.handles for layer in h.layers}
        return Summary(r for r in summary(self.model) if (r.layer, r.transform) in ours)

    def remove(self) -> None:
        """Take every attachment off (idempotent); the model is exactly as before."""
        for h in self.handles:
            h.remove()

    def __enter__(self) -> "AttachmentGroup":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        inner = ", ".join(self.labels)
        return f"AttachmentGroup([{inner}], step={self.step_count}, attached={self.attached})"


def attach_all(model: nn.Module, spec: SpecLike | Sequence[AttachmentSpec], *,
               steps: int | None = None, scaler: Any = None, example_input: Any = None,
               source: str | None = None) -> AttachmentGroup:
    """Attach a list of attachments written as data, all or nothing.

        >>> group = pd.attach_all(model, '''
        ... - {layers: "layer3.*", transform: DropBlock, block_size: 5,
        ...    p: {schedule: linear, start: 0.0, end: 0.1}}
        ... - {layers: "layer*.*.conv2", transform: DropPath, p: 0.05}
        ... ''', steps=5000)
        >>> group.bind(optimizer)

    Args:
        model: any ``nn.Module``.
        spec: what :func:`parse_spec` reads (a list of mappings, a YAML file or text; the entries
            of a ``plugdrop ablate`` variant), or its result.
        steps: the optimizer steps that schedules written without ``steps:`` span (the
            training's length); ``None``: each schedule must give its own.
        scaler: a ``torch.amp.GradScaler`` handed to the gradient transforms that take one
            (their clipping then sees unscaled gradients).
        example_input: one input batch (a tuple: positional inputs, a dict: keyword inputs)
            to find the model's residual branches with, for selectors ``"residual:..."``
            (see :func:`plugdrop.residual_branches`); ``None``: they are traced with
            ``torch.fx``, or were found before.
        source: the spec's name in errors (see :func:`parse_spec`).

    Returns:
        An :class:`AttachmentGroup`.

    Raises:
        SpecError: what :func:`parse_spec` raises, a schedule without ``steps:`` and no
            ``steps``.
        SelectorError, AttachError: what :func:`plugdrop.attach` raises for an attachment,
            prefixed with its place. Nothing stays attached when attach_all raises.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"attach_all() needs a torch.nn.Module, got {type(model).__name__}")
    if isinstance(steps, bool) or steps is not None and (not isinstance(steps, int) or steps < 1):
        raise SettingError(f"attach_all(steps=) takes a whole number of steps >= 1, got "
                           f"{steps!r}")
    if isinstance(spec, Sequence) and spec and all(isinstance(s, AttachmentSpec) for s in spec):
        specs = list(spec)
        check_together(specs)
    else:
        specs = parse_spec(spec, source=source)
    if example_input is not None and any(s.residual for s in specs):
        residual_branches(model, example_input)
    handles: list[Handle] = []
    try:
        for s in specs:
            try:
                handles.append(s.attach(model, steps, scaler))
            except SpecError:
                raise
            except ValueError as e:
                msg = one_line(e)
                raise type(e)(f"{s.loc}: {msg}" if s.loc else msg) from None
    except BaseException:
        for h in handles:
            h.remove()
        raise
    group = AttachmentGroup(model, specs, handles)
    for watcher in WATCHERS:
        watcher(group, spec)
    return group

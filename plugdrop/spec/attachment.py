"""One attachment of a spec: ``{layers, transform, <its settings>, exclude, where, element}``,
checked against the transform's own signature, and the checks only a whole list shows."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch.nn as nn

from .._attach import Handle, attach
from ..errors import SpecError, one_line
from ..transforms import CoordinatedTransform, GradientTransform, catalog
from ._values import PROBE_STEPS, build_value, check_schedule, steps_needed, transform_names
from ._yaml import Loc, LocDict, fail, plain, suggest

__all__ = ["ATTACH_KEYS", "AttachmentSpec", "check_together", "parse_attachment"]

#: the keys of an attachment that are not settings of its transform
ATTACH_KEYS = ("layers", "transform", "exclude", "where", "element")


@dataclass(frozen=True)
class AttachmentSpec:
    """One checked attachment of a spec: which layers, which transform, and its settings (as
    written: numbers, or schedules as mappings such as ``{schedule: linear, start: 0, end:
    0.1}``). :func:`plugdrop.attach_all` builds and attaches a list of them.

    Attributes:
        layers: the selector (a glob or a list of globs, see :func:`plugdrop.select`).
        transform: the transform's class name (``"DropBlock"``).
        kwargs: the transform's settings.
        exclude, where, element: as :func:`plugdrop.attach` takes them.
        loc: where the attachment was written (``file:line:column`` or ``spec[i]``).
    """

    layers: Any
    transform: str
    kwargs: Mapping[str, Any]
    exclude: Any = None
    where: str = "output"
    element: Any = None
    loc: str = ""

    @property
    def cls(self) -> type:
        """The transform's class."""
        return transform_names()[self.transform]

    @property
    def kind(self) -> str:
        """``"forward"`` or ``"gradient"``: which of the library's transform kinds it is."""
        return "gradient" if issubclass(self.cls, GradientTransform) else "forward"

    @property
    def coordinated(self) -> bool:
        """Whether it decides once per forward of the model (a
        :class:`~plugdrop.CoordinatedTransform`: ManifoldMixup, PatchUp) and mixes the targets
        through its handle."""
        return issubclass(self.cls, CoordinatedTransform)

    def build(self, steps: int | None = None, scaler: Any = None) -> Any:
        """The transform object.

        Args:
            steps: what schedules written without ``steps:`` span (``None``: they must give it).
            scaler: a ``torch.amp.GradScaler`` for the gradient transforms that take one.

        Raises:
            SpecError: a schedule without ``steps:`` and no ``steps``.
        """
        kwargs = {}
        for k, v in self.kwargs.items():
            try:
                kwargs[k] = build_value(v, steps)
            except SpecError as e:
                raise fail(self.loc, f"{k}: {e}") from None
        if scaler is not None and "scaler" in inspect.signature(self.cls).parameters:
            kwargs.setdefault("scaler", scaler)
        return self.cls(**kwargs)

    def attach(self, model: nn.Module, steps: int | None = None, scaler: Any = None) -> Handle:
        """:func:`plugdrop.attach` of :meth:`build`'s transform; returns its handle."""
        return attach(model, self.layers, self.build(steps, scaler),
                      exclude=self.exclude, where=self.where, element=self.element)

    def describe(self) -> dict[str, Any]:
        """The attachment as a plain mapping, in the form it is written (defaults left out)."""
        out: dict[str, Any] = {"layers": self.layers, "transform": self.transform,
                               **self.kwargs}
        for key, default in (("exclude", None), ("where", "output"), ("element", None)):
            if getattr(self, key) != default:
                out[key] = getattr(self, key)
        return out

    @property
    def residual(self) -> bool:
        """Whether its ``layers`` or ``exclude`` name residual branches (``"residual:..."``),
        which need :func:`plugdrop.residual_branches` of the model."""
        def uses(sel: Any) -> bool:
            return (isinstance(sel, str) and sel.startswith("residual:")
                    or isinstance(sel, list) and any(uses(x) for x in sel))
        return uses(self.layers) or uses(self.exclude)

    @property
    def needs_steps(self) -> dict[str, str]:
        """Setting -> the name of its schedule that takes its length from the training
        (written without ``steps:``; ``{"p": "linear"}``): building these needs the training's
        optimizer steps. Empty when every schedule gives its own."""
        kinds = {k: steps_needed(v) for k, v in self.kwargs.items()}
        return {k: kind for k, kind in kinds.items() if kind is not None}

    @property
    def label(self) -> str:
        """A short name for logs: ``DropBlock@layer3.*``."""
        return f"{self.transform}@{self.layers}"


def parse_attachment(raw: Any, loc: Loc | None = None, context: str = "") -> AttachmentSpec:
    """Check one attachment mapping and build its transform once, so that a bad setting fails
    here, at its place (``loc``: where the mapping was written; ``context``, e.g.
    ``"variant 'a'"``, starts the message of a value that is not a mapping).

    Raises:
        SpecError: not a mapping, no ``layers`` or ``transform``, an unknown transform,
            setting or schedule, a bad ``where`` or selector, values the transform rejects.
    """
    transforms = transform_names()
    if not isinstance(raw, Mapping):
        head = f"{context}: " if context else ""
        raise fail(loc, f"{head}each attachment is a mapping like "
                        f"{{layers: 'layer3.*', transform: DropBlock, p: 0.1}}")
    at = raw.at if isinstance(raw, LocDict) else (lambda k: loc)
    for key in ("layers", "transform"):
        if key not in raw:
            typo = [k for k in raw if k not in ATTACH_KEYS and suggest(k, [key])]
            if typo:
                raise fail(at(typo[0]), f"an attachment has no key {typo[0]!r}"
                                        f"{suggest(typo[0], [key])}; it takes "
                                        f"{', '.join(ATTACH_KEYS)} and the transform's settings")
            raise fail(loc, f"attachment without {key!r}")
    name = raw["transform"]
    if not isinstance(name, str) or name not in transforms:
        raise fail(at("transform"), f"unknown transform {name!r}{suggest(name, transforms)}"
                                    f"; known: {', '.join(transforms)}")
    cls = transforms[name]
    params = [p for p in inspect.signature(cls).parameters if p != "scaler"]
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ATTACH_KEYS:
            continue
        if key not in params:
            raise fail(at(key), f"{name} has no setting {key!r}"
                                f"{suggest(key, params + list(ATTACH_KEYS))}; it takes "
                                f"{', '.join(params)}")
        check_schedule(value, at(key))
        kwargs[key] = plain(value)
    where = raw.get("where", "output")
    if where not in ("output", "input", "params"):
        raise fail(at("where"), f"where must be output, input or params, got {where!r}")
    layers = plain(raw["layers"])
    if not (isinstance(layers, str) or (isinstance(layers, list) and layers and all(
            isinstance(s, str) for s in layers))):
        raise fail(at("layers"), f"layers must be a selector (a glob such as 'layer3.*') or "
                                 f"a list of them, got {layers!r}")
    spec = AttachmentSpec(layers=layers, transform=name, kwargs=kwargs,
                          exclude=plain(raw.get("exclude")), where=where,
                          element=plain(raw.get("element")), loc=str(loc or ""))
    try:
        spec.build(PROBE_STEPS)
    except (TypeError, ValueError) as e:
        bad = next((at(k) for k in kwargs if re.match(rf"\W*{re.escape(str(k))}\b", str(e))),
                   loc)
        raise fail(bad, f"bad {name} settings: {one_line(e)}") from None
    return spec


def check_together(specs: Sequence[AttachmentSpec], name: str = "the spec") -> None:
    """What only a whole list of attachments shows (``name`` names the list in messages).
    Coordinated transforms are told apart by protocol, not by name: two different ones compose
    (the loss mixes the targets as each of them mixed), two of the same class would only split
    one transform's layers in two.

    Raises:
        SpecError: two attachments of one coordinated transform, a coordinated transform with
            ``where`` other than ``output``, ``where: params`` with a forward transform.
    """
    coordinated = [a for a in specs if a.coordinated]
    for a in coordinated:
        same = [b for b in coordinated if b.transform == a.transform]
        if len(same) > 1:
            raise fail(same[1].loc, f"{name} has {len(same)} {a.transform} "
                                    f"attachments; use one with a list of layers")
    for a in coordinated:
        if a.where != "output":
            raise fail(a.loc, f"{a.transform} mixes module outputs; remove 'where: {a.where}' "
                              f"(attach it to \"\" to mix the input)")
    for a in specs:
        if a.where == "params" and a.kind != "gradient":
            raise fail(a.loc, f"where: params takes a gradient transform "
                              f"({', '.join(catalog('gradient'))}); "
                              f"{a.transform} acts on activations: remove 'where'")

"""One attachment of a variant: ``{layers, transform, <its settings>, exclude, where, element}``,
checked against the transform's own signature and built into a transform object."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import plugdrop as pd

from .locations import Loc, LocDict, fail, plain, suggest
from .values import build_value, check_schedule, transform_names

__all__ = ["ATTACH_KEYS", "Attachment", "parse_attachment"]

#: the keys of an attachment that are not settings of its transform
ATTACH_KEYS = ("layers", "transform", "exclude", "where", "element")


@dataclass(frozen=True)
class Attachment:
    """One attachment of a variant: which layers, which transform, and its settings."""

    layers: Any
    transform: str
    kwargs: Mapping[str, Any]
    exclude: Any = None
    where: str = "output"
    element: Any = None
    loc: str = ""

    @property
    def cls(self) -> type:
        return transform_names()[self.transform]

    @property
    def kind(self) -> str:
        """"forward" or "gradient": which of the library's transform kinds it is."""
        return "gradient" if issubclass(self.cls, pd.GradientTransform) else "forward"

    @property
    def coordinated(self) -> bool:
        """Whether it decides once per forward of the model (:class:`plugdrop.CoordinatedTransform`:
        ManifoldMixup, PatchUp) and mixes the targets through its handle."""
        return issubclass(self.cls, pd.CoordinatedTransform)

    def build(self, total_steps: int, scaler: Any = None) -> Any:
        """The transform object, its schedules spanning ``total_steps``; gradient transforms
        that take a ``scaler`` get the run's GradScaler."""
        kwargs = {k: build_value(v, total_steps) for k, v in self.kwargs.items()}
        if scaler is not None and "scaler" in inspect.signature(self.cls).parameters:
            kwargs.setdefault("scaler", scaler)
        return self.cls(**kwargs)

    def attach(self, model: Any, total_steps: int, scaler: Any = None) -> Any:
        return pd.attach(model, self.layers, self.build(total_steps, scaler),
                         exclude=self.exclude, where=self.where, element=self.element)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"layers": self.layers, "transform": self.transform,
                               **self.kwargs}
        for key, default in (("exclude", None), ("where", "output"), ("element", None)):
            if getattr(self, key) != default:
                out[key] = getattr(self, key)
        return out

    @property
    def label(self) -> str:
        """A short name for logs: ``DropBlock@layer3.*``."""
        return f"{self.transform}@{self.layers}"


def parse_attachment(raw: Any, loc: Loc | None, variant: str) -> Attachment:
    """Check one attachment mapping of variant ``variant`` and build it once (so that bad
    settings fail here, at their place in the file)."""
    transforms = transform_names()
    if not isinstance(raw, Mapping):
        raise fail(loc, f"variant {variant!r}: each attachment is a mapping like "
                        f"{{layers: 'layer3.*', transform: DropBlock, p: 0.1}}")
    at = raw.at if isinstance(raw, LocDict) else (lambda k: loc)
    for key in ("layers", "transform"):
        if key not in raw:
            raise fail(loc, f"attachment without {key!r}")
    name = raw["transform"]
    if name not in transforms:
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
    spec = Attachment(layers=layers, transform=name, kwargs=kwargs,
                      exclude=plain(raw.get("exclude")), where=where,
                      element=plain(raw.get("element")), loc=str(loc or ""))
    try:
        spec.build(1000)
    except (TypeError, ValueError) as e:
        where = next((at(k) for k in kwargs if re.match(rf"\W*{re.escape(str(k))}\b", str(e))),
                     loc)
        raise fail(where, f"bad {name} settings: {' '.join(str(e).split())}") from None
    return spec

"""Ablation configs: YAML in, a validated, frozen :class:`AblationConfig` out.

Every error a user can cause is a :class:`~plugdrop.ablate.errors.ConfigError` whose one-line
message starts with the place: ``file:line:column`` for a value of the YAML file, ``--set KEY``
or ``--FLAG`` for a value given on the command line. Transforms and schedules are looked up by
name in the library itself (``plugdrop.__all__``), so a new transform is usable here at once.

Command-line overrides reach nested settings Hydra-style: ``--set variants.dropblock.0.p=0.2``.
A setting of an attachment given as ``{grid: [values]}`` expands the variant into one variant per
combination, named after the values: ``dropblock[p=0.1,block_size=5]``.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import itertools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

import plugdrop as pd

from .errors import ConfigError

__all__ = ["AblationConfig", "Attachment", "Variant", "load", "parse", "parse_overrides",
           "transform_names", "schedule_names", "VARIANT_NAME"]

#: what a variant name may contain (it becomes a folder name)
VARIANT_NAME = re.compile(r"[A-Za-z0-9_.,=+\[\]-]+")
_USER_VARIANT = re.compile(r"[A-Za-z0-9_.+-]+")
_ABSTRACT = {"Transform", "ForwardTransform", "GradientTransform"}
_ATTACH_KEYS = ("layers", "transform", "exclude", "where", "element")


def transform_names() -> dict[str, type]:
    """Every transform class the library exports, by name."""
    out: dict[str, type] = {}
    for name in pd.__all__:
        obj = getattr(pd, name, None)
        if (isinstance(obj, type) and issubclass(obj, pd.Transform) and name not in _ABSTRACT):
            out[name] = obj
    return out


def schedule_names() -> dict[str, Callable[..., Any]]:
    """Every schedule factory the library exports (``linear``, ``cosine``, ...), by name."""
    return {name: obj for name, obj in inspect.getmembers(pd.schedules, inspect.isfunction)
            if name in pd.__all__ and getattr(pd, name) is obj}


# ----------------------------------------------------------------------------- locations


@dataclass(frozen=True)
class Loc:
    """Where a value came from: ``file:line:column`` or a command-line option."""

    text: str

    def __str__(self) -> str:
        return self.text


def _fail(loc: Loc | str | None, msg: str) -> ConfigError:
    return ConfigError(f"{loc}: {msg}" if loc else msg)


class _LocDict(dict):
    """A mapping that remembers where it and each of its keys came from."""

    def __init__(self, data: Mapping[Any, Any], loc: Loc, keys: Mapping[Any, Loc]):
        super().__init__(data)
        self.loc = loc
        self.keys_loc = dict(keys)

    def at(self, key: Any) -> Loc:
        return self.keys_loc.get(key, self.loc)


class _LocList(list):
    def __init__(self, data: Sequence[Any], loc: Loc):
        super().__init__(data)
        self.loc = loc


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading ``1e-3`` and ``5e-4`` as floats (YAML 1.2 does; PyYAML's
    1.1 resolver wants a dot)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def _where(node: yaml.Node, file: str, label: str | None) -> Loc:
    if label is not None:
        return Loc(label)
    return Loc(f"{file}:{node.start_mark.line + 1}:{node.start_mark.column + 1}")


def _to_python(node: yaml.Node, file: str, label: str | None = None) -> Any:
    """A composed YAML node -> Python values that remember their locations; duplicate keys
    are errors."""
    loc = _where(node, file, label)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        keys: dict[Any, Loc] = {}
        for k, v in node.value:
            key = _to_python(k, file, label)
            kloc = _where(k, file, label)
            if isinstance(key, (dict, list)):
                raise _fail(kloc, "a key must be a plain value")
            if key in out:
                raise _fail(kloc, f"duplicate key {key!r} (first at {keys[key]}); keep one")
            out[key] = _to_python(v, file, label)
            keys[key] = kloc
        return _LocDict(out, loc, keys)
    if isinstance(node, yaml.SequenceNode):
        return _LocList([_to_python(v, file, label) for v in node.value], loc)
    return _Loader("").construct_object(node, deep=True)


def _loc(value: Any, default: Loc | None) -> Loc | None:
    return getattr(value, "loc", None) or default


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _suggest(name: Any, options: Sequence[str] | Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(str(name), [str(o) for o in options], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _yaml_text(text: str, file: str, label: str | None = None) -> Any:
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        if label is not None:
            raise ConfigError(f"{label}: {text!r} is not valid YAML ({problem}); quote it or "
                              f"fix the brackets") from None
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        raise ConfigError(f"{where}: not valid YAML: {problem}") from None
    if node is None:
        return None
    return _to_python(node, file, label)


# ------------------------------------------------------------------------------- schedules


def build_value(value: Any, total_steps: int) -> Any:
    """A config value -> a number, or a plugdrop schedule (``steps`` default to the run)."""
    if not isinstance(value, Mapping) or "schedule" not in value:
        return value
    spec = dict(value)
    kind = spec.pop("schedule")
    factory = schedule_names()[kind]
    params = inspect.signature(factory).parameters
    if "value" in spec and "value" not in params and "schedule" in params:
        spec["schedule"] = spec.pop("value")  # {schedule: warmup, value: ..., steps: ...}
    if "steps" in params and "steps" not in spec:
        spec["steps"] = total_steps
    spec = {k: build_value(v, total_steps) for k, v in spec.items()}
    if kind == "piecewise" and isinstance(spec.get("points"), Mapping):
        spec["points"] = {int(k) if isinstance(k, str) and k.isdigit() else k: v
                          for k, v in spec["points"].items()}
    return factory(**spec)


def _check_schedule(value: Any, loc: Loc | None) -> None:
    if isinstance(value, Mapping) and "schedule" in value:
        kind = value["schedule"]
        known = schedule_names()
        if kind not in known:
            raise _fail(loc, f"unknown schedule {kind!r}{_suggest(kind, known)}; use one of "
                             f"{', '.join(known)}")
        params = [p for p in inspect.signature(known[kind]).parameters]
        for k in value:
            if k != "schedule" and k not in params and not (k == "value" and "schedule"
                                                            in params):
                raise _fail(value.at(k) if isinstance(value, _LocDict) else loc,
                            f"the {kind} schedule has no setting {k!r}{_suggest(k, params)}; "
                            f"it takes {', '.join(params)}")
        for k, v in value.items():
            if k != "schedule":
                _check_schedule(v, value.at(k) if isinstance(value, _LocDict) else loc)
        try:
            build_value(_plain(value), 1000)
        except (TypeError, ValueError, KeyError) as e:
            raise _fail(loc, f"bad {kind} schedule {_plain(value)}: {e}") from None


# ----------------------------------------------------------------------------- the config


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
        return str(getattr(self.cls, "kind", ""))

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


@dataclass(frozen=True)
class Variant:
    """A named list of attachments (empty: the baseline)."""

    name: str
    attachments: tuple[Attachment, ...]
    loc: str = ""
    grid: Mapping[str, Any] = field(default_factory=dict)


_DEVICES = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
_SCHEDULERS = ("cosine", "constant", "step", "multistep", "poly", "tanh")


@dataclass(frozen=True)
class AblationConfig:
    """A validated ablation config (see the README's "Ablations" section for each setting)."""

    model: str
    variants: tuple[Variant, ...]
    model_kwargs: Mapping[str, Any] = field(default_factory=dict)
    pretrained: bool | str | None = None
    data: Any = "digits"
    image_size: int = 32
    val_fraction: float = 0.2
    workers: int | str = "auto"
    augment: Mapping[str, Any] | None = None
    bad_images: str = "error"
    epochs: int = 10
    batch_size: int = 64
    grad_accum: int = 1
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    lr_schedule: str = "cosine"
    warmup_epochs: int = 0
    warmup_lr: float = 0.0
    min_lr: float = 0.0
    label_smoothing: float = 0.0
    clip_grad: float | None = None
    amp: str = "off"
    channels_last: bool = False
    ema: float | None = None
    seeds: tuple[int, ...] = (0,)
    device: str = "auto"
    out: str = "runs/ablation"
    watch: Any = "auto"
    gradcam: Any = "auto"
    log: tuple[str, ...] = ()
    source: str = "<config>"
    locs: Mapping[str, str] = field(default_factory=dict, compare=False)

    # -- derived ------------------------------------------------------------------------

    def variant(self, name: str) -> Variant:
        return next(v for v in self.variants if v.name == name)

    @property
    def variant_names(self) -> list[str]:
        return [v.name for v in self.variants]

    @property
    def baseline(self) -> str | None:
        """The reference variant: ``baseline`` if present, else the first empty one."""
        names = self.variant_names
        if "baseline" in names:
            return "baseline"
        return next((v.name for v in self.variants if not v.attachments), None)

    def runs(self) -> list[tuple[str, int]]:
        """Every (variant, seed), in training order."""
        return [(v.name, s) for v in self.variants for s in self.seeds]

    def loc(self, key: str) -> str:
        """Where ``key`` was set (for errors found later), or the config file."""
        return self.locs.get(key, self.source)

    def resolved(self) -> dict[str, Any]:
        """The whole config with defaults filled in, as plain JSON-able data."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("locs", "source", "variants"):
                continue
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else _plain(
                dict(value) if isinstance(value, Mapping) else value)
        out["variants"] = {v.name: [a.describe() for a in v.attachments]
                           for v in self.variants}
        return out

    def hash(self) -> str:
        """A fingerprint of everything that changes results (not out, device, workers, log)."""
        r = self.resolved()
        for key in ("out", "device", "workers", "log"):
            r.pop(key, None)
        blob = json.dumps(r, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def attached_layers(self) -> list[Any]:
        """The selectors of every forward-transform output attachment of every variant, in
        order, without duplicates (the watch and Grad-CAM default)."""
        out: list[Any] = []
        for v in self.variants:
            for a in v.attachments:
                if a.kind == "forward" and a.where == "output" and not issubclass(
                        a.cls, pd.ManifoldMixup):
                    for sel in (a.layers if isinstance(a.layers, list) else [a.layers]):
                        if sel not in out:
                            out.append(sel)
        return out


# ------------------------------------------------------------------------- option checks


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_option(key: str, value: Any, loc: Loc | None) -> Any:
    """Validate and normalize one top-level setting."""
    def need(ok: bool, what: str, hint: str = "") -> None:
        if not ok:
            raise _fail(loc, f"{key} must be {what}, got {_plain(value)!r}{hint}")

    if key in ("epochs", "batch_size", "image_size", "grad_accum"):
        need(_is_int(value) and value >= 1, "an integer >= 1")
    elif key in ("lr",):
        need(_is_num(value) and value > 0, "a number > 0")
        value = float(value)
    elif key in ("weight_decay", "min_lr", "warmup_lr"):
        need(_is_num(value) and value >= 0, "a number >= 0")
        value = float(value)
    elif key == "warmup_epochs":
        need(_is_int(value) and value >= 0, "an integer >= 0")
    elif key in ("momentum", "label_smoothing"):
        need(_is_num(value) and 0 <= value < 1, "a number in [0, 1)")
        value = float(value)
    elif key == "val_fraction":
        need(_is_num(value) and 0 < value < 1, "a number in (0, 1)")
        value = float(value)
    elif key == "clip_grad":
        need(value is None or value is False or (_is_num(value) and value > 0),
             "a number > 0 (the global gradient norm) or null")
        value = float(value) if _is_num(value) else None
    elif key == "seeds":
        if _is_int(value):
            value = [value]
        need(isinstance(value, list) and len(value) > 0 and all(_is_int(s) for s in value),
             "a list of integers")
        dup = sorted({s for s in value if value.count(s) > 1})
        need(not dup, "a list of distinct integers", f" ({dup[0]} is listed twice)" if dup else "")
        value = tuple(value)
    elif key == "optimizer":
        import timm.optim

        known = timm.optim.list_optimizers()
        need(isinstance(value, str) and value.lower() in known,
             "a timm optimizer name (sgd, adamw, lamb, ...)",
             _suggest(value, [str(k) for k in known]) if isinstance(value, str) else "")
        value = value.lower()
    elif key == "lr_schedule":
        need(value in _SCHEDULERS, " | ".join(_SCHEDULERS),
             _suggest(value, _SCHEDULERS) if isinstance(value, str) else "")
    elif key == "amp":
        if value is False or value is None:
            value = "off"
        need(value in ("off", "bf16", "fp16"), "off, bf16 or fp16")
    elif key == "channels_last":
        need(isinstance(value, bool), "true or false")
    elif key == "ema":
        if value is True:
            value = 0.9998
        elif value is False or value is None:
            value = None
        elif isinstance(value, Mapping):
            unknown = set(value) - {"decay"}
            need(not unknown and "decay" in value, "true, false, a decay or {decay: 0.9998}")
            value = value["decay"]
        need(value is None or (_is_num(value) and 0 < value < 1),
             "true, false or a decay in (0, 1) such as 0.9998")
    elif key == "device":
        need(isinstance(value, str) and _DEVICES.fullmatch(value) is not None,
             "auto, cpu, cuda or cuda:N",
             " (did you mean 'cuda'?)" if value in ("gpu", "GPU", "cuda0") else "")
    elif key == "out":
        need(isinstance(value, str) and value.strip() != "", "a non-empty folder path")
    elif key == "model":
        need(isinstance(value, str) and value.strip() != "",
             "a timm model name (resnet18) or package.module:factory")
    elif key == "model_kwargs":
        if value is None:
            value = {}
        need(isinstance(value, Mapping), "a mapping of keyword arguments, e.g. {drop_rate: 0.1}")
    elif key == "pretrained":
        need(value is None or isinstance(value, bool) or (isinstance(value, str) and value != ""),
             "true (timm's cache), false, or the path of a checkpoint file")
        if value is False:
            value = None
    elif key == "data":
        from .data import parse_data_spec

        try:
            parse_data_spec(_plain(value))
        except ConfigError as e:
            raise _fail(loc, str(e)) from None
    elif key == "workers":
        need(value == "auto" or (_is_int(value) and value >= 0), "auto or an integer >= 0")
    elif key == "augment":
        if value is False:
            value = None
        if value is not None:
            from .data import AUGMENT_KEYS

            need(isinstance(value, Mapping), "a mapping of timm transform settings")
            for k in value:
                if k not in AUGMENT_KEYS:
                    raise _fail(value.at(k) if isinstance(value, _LocDict) else loc,
                                f"augment has no setting {k!r}{_suggest(k, sorted(AUGMENT_KEYS))}; "
                                f"known: {', '.join(sorted(AUGMENT_KEYS))}")
    elif key == "bad_images":
        need(value in ("error", "skip"), "error or skip")
    elif key == "watch":
        ok = value in ("auto", False, None) or isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(s, str) for s in value))
        need(ok, "auto, false, or a selector (a glob or a list of globs)")
        if value is None:
            value = False
    elif key == "gradcam":
        if isinstance(value, str) and value != "auto":
            value = {"layer": value}
        if isinstance(value, Mapping):
            unknown = set(value) - {"layer", "images"}
            if unknown:
                raise _fail(loc, f"gradcam has no setting {sorted(unknown)[0]!r}; it takes "
                                 f"layer and images")
            images = value.get("images", 8)
            if not (_is_int(images) and images >= 1):
                raise _fail(value.at("images") if isinstance(value, _LocDict) else loc,
                            f"gradcam images must be an integer >= 1, got {images!r}; use "
                            f"gradcam: false for none")
            need(isinstance(value.get("layer", "auto"), str), "{layer: NAME, images: N}")
        else:
            need(value in ("auto", False, None), "auto, false, a layer name or {layer, images}")
            if value is None:
                value = False
    elif key == "log":
        if value in (None, False):
            value = []
        if isinstance(value, str):
            value = [value]
        need(isinstance(value, list) and all(v == "tensorboard" for v in value),
             "a list of loggers: [tensorboard] or []")
        value = tuple(value)
    return _plain(value)


# ------------------------------------------------------------------------- attachments


def _parse_attachment(raw: Any, loc: Loc | None, variant: str) -> Attachment:
    transforms = transform_names()
    if not isinstance(raw, Mapping):
        raise _fail(loc, f"variant {variant!r}: each attachment is a mapping like "
                         f"{{layers: 'layer3.*', transform: DropBlock, p: 0.1}}")
    at = raw.at if isinstance(raw, _LocDict) else (lambda k: loc)
    for key in ("layers", "transform"):
        if key not in raw:
            raise _fail(loc, f"attachment without {key!r}")
    name = raw["transform"]
    if name not in transforms:
        raise _fail(at("transform"), f"unknown transform {name!r}{_suggest(name, transforms)}"
                                     f"; known: {', '.join(transforms)}")
    cls = transforms[name]
    params = [p for p in inspect.signature(cls).parameters if p != "scaler"]
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _ATTACH_KEYS:
            continue
        if key not in params:
            raise _fail(at(key), f"{name} has no setting {key!r}"
                                 f"{_suggest(key, params + list(_ATTACH_KEYS))}; it takes "
                                 f"{', '.join(params)}")
        _check_schedule(value, at(key))
        kwargs[key] = _plain(value)
    where = raw.get("where", "output")
    if where not in ("output", "input", "params"):
        raise _fail(at("where"), f"where must be output, input or params, got {where!r}")
    layers = _plain(raw["layers"])
    if not (isinstance(layers, str) or (isinstance(layers, list) and layers and all(
            isinstance(s, str) for s in layers))):
        raise _fail(at("layers"), f"layers must be a selector (a glob such as 'layer3.*') or "
                                  f"a list of them, got {layers!r}")
    spec = Attachment(layers=layers, transform=name, kwargs=kwargs,
                      exclude=_plain(raw.get("exclude")), where=where,
                      element=_plain(raw.get("element")), loc=str(loc or ""))
    try:
        spec.build(1000)
    except (TypeError, ValueError) as e:
        where = next((at(k) for k in kwargs if re.match(rf"\W*{re.escape(str(k))}\b", str(e))),
                     loc)
        raise _fail(where, f"bad {name} settings: {' '.join(str(e).split())}") from None
    return spec


def _grid_keys(specs: list[Any]) -> list[tuple[int, str, list[Any], Loc | None]]:
    out = []
    for i, raw in enumerate(specs):
        if not isinstance(raw, Mapping):
            continue
        for key, value in raw.items():
            if isinstance(value, Mapping) and "grid" in value:
                vloc = _loc(value, raw.at(key) if isinstance(raw, _LocDict) else None)
                values = value["grid"]
                if len(value) != 1 or not isinstance(values, list) or not values:
                    raise _fail(vloc, f"{key}: a grid is {{grid: [value, value, ...]}} with at "
                                      f"least one value")
                out.append((i, str(key), list(values), vloc))
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list)):
        return json.dumps(_plain(value), separators=(",", ":"))
    return str(value)


def _expand(name: str, specs: list[Any], loc: Loc | None) -> list[tuple[str, list[Any],
                                                                         dict[str, Any]]]:
    """One (name, attachments, grid point) per combination of the grid values of a variant."""
    grids = _grid_keys(specs)
    if not grids:
        return [(name, specs, {})]
    labels = [k for _, k, _, _ in grids]
    dup = {k for k in labels if labels.count(k) > 1}
    labels = [f"{i}.{k}" if k in dup else k for i, k, _, _ in grids]
    out = []
    for combo in itertools.product(*[vals for _, _, vals, _ in grids]):
        new = [dict(s) if isinstance(s, Mapping) else s for s in specs]
        for (i, key, _, _), value in zip(grids, combo):
            new[i][key] = value
        for j, s in enumerate(specs):  # keep locations for errors
            if isinstance(s, _LocDict):
                new[j] = _LocDict(new[j], s.loc, s.keys_loc)
        point = {lab: _plain(v) for lab, v in zip(labels, combo)}
        vname = f"{name}[{','.join(f'{k}={_fmt(v)}' for k, v in point.items())}]"
        if not VARIANT_NAME.fullmatch(vname):
            raise _fail(grids[0][3], f"grid values must be plain numbers or words to name the "
                                     f"variants; {vname!r} is not a folder-safe name")
        out.append((vname, new, point))
    return out


# ---------------------------------------------------------------------------- overrides


@dataclass(frozen=True)
class Override:
    """A command-line change of one setting: ``path`` into the config, the new value."""

    path: str
    value: Any
    label: str


def parse_overrides(items: Sequence[str]) -> list[Override]:
    """``--set KEY=VALUE`` strings -> overrides; values are YAML (``--set lr=1e-3``)."""
    out = []
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item}: --set takes KEY=VALUE (e.g. --set epochs=5 or "
                              f"--set variants.dropblock.0.p=0.2)")
        label = f"--set {key}"
        value = _yaml_text(text, "--set", label) if text.strip() else None
        out.append(Override(key, value, label))
    return out


def flag(name: str, key: str, value: Any) -> Override:
    """An override from a dedicated flag such as ``--epochs``."""
    if isinstance(value, list):
        value = _LocList(value, Loc(name))
    return Override(key, value, name)


def _apply(raw: _LocDict, ov: Override) -> None:
    parts = ov.path.split(".")
    node: Any = raw
    i = 0
    loc = Loc(ov.label)
    while True:
        last = i == len(parts) - 1
        if isinstance(node, dict):
            # longest key made of the remaining segments (names may contain dots)
            key = None
            for j in range(len(parts), i, -1):
                cand = ".".join(parts[i:j])
                if cand in node:
                    key, i, last = cand, j - 1, j == len(parts)
                    break
            if key is None:
                key = parts[i]
                if not last:
                    raise _fail(loc, f"no setting {'.'.join(parts[:i + 1])!r}"
                                     f"{_suggest(key, [str(k) for k in node])}")
            if last:
                node[key] = ov.value
                if isinstance(node, _LocDict):
                    node.keys_loc[key] = loc
                return
            node = node[key]
        elif isinstance(node, list):
            seg = parts[i]
            if not seg.isdigit() or int(seg) >= len(node):
                raise _fail(loc, f"{'.'.join(parts[:i])} is a list of {len(node)}; "
                                 f"{seg!r} is no index in it (0..{len(node) - 1})")
            if last:
                node[int(seg)] = ov.value
                return
            node = node[int(seg)]
        else:
            raise _fail(loc, f"{'.'.join(parts[:i])} is a value, not a mapping or list")
        i += 1


# -------------------------------------------------------------------------------- parse


_TOP = {f.name for f in fields(AblationConfig)} - {"source", "locs"}


def parse(raw: Any, source: str = "<config>", overrides: Sequence[Override] = ()
          ) -> AblationConfig:
    """Validate a loaded config (see :func:`load`) after applying ``overrides``."""
    root_loc = getattr(raw, "loc", None) or Loc(source)
    if not isinstance(raw, dict):
        raise _fail(root_loc, "the config must be a mapping of settings (model, data, "
                              "variants...)")
    if not isinstance(raw, _LocDict):
        raw = _LocDict(raw, root_loc, {})
    for ov in overrides:
        _apply(raw, ov)
    options: dict[str, Any] = {}
    locs: dict[str, str] = {}
    for key, value in raw.items():
        kloc = raw.at(key)
        if key not in _TOP:
            raise _fail(kloc, f"unknown setting {key!r}{_suggest(key, sorted(_TOP))}; known: "
                              f"{', '.join(sorted(_TOP))}")
        locs[str(key)] = str(kloc)
        if key != "variants":
            options[key] = _check_option(key, value, kloc)
    if "model" not in options:
        raise _fail(root_loc, "the config needs 'model:' (a timm model name such as resnet18)")
    variants_raw = raw.get("variants")
    if not isinstance(variants_raw, Mapping) or not variants_raw:
        raise _fail(raw.at("variants") if "variants" in raw else root_loc,
                    "the config needs 'variants:', a mapping of name -> list of attachments "
                    "(an empty list is the baseline)")
    variants: list[Variant] = []
    at = variants_raw.at if isinstance(variants_raw, _LocDict) else (lambda k: root_loc)
    for name, specs in variants_raw.items():
        loc = at(name)
        if not isinstance(name, str) or not _USER_VARIANT.fullmatch(name):
            raise _fail(loc, f"variant name {name!r}: use letters, digits and _ . + - only "
                             f"(it names a folder)")
        if specs is None:
            specs = []
        if not isinstance(specs, list):
            raise _fail(loc, f"variant {name!r} must be a list of attachments ([] for none)")
        for vname, vspecs, point in _expand(name, specs, loc):
            atts = tuple(_parse_attachment(s, _loc(s, loc), name) for s in vspecs)
            mixes = [a for a in atts if issubclass(a.cls, pd.ManifoldMixup)]
            if len(mixes) > 1:
                raise _fail(mixes[1].loc, f"variant {name!r} has {len(mixes)} ManifoldMixup "
                                          f"attachments; use one with a list of layers")
            for a in mixes:
                if a.where != "output":
                    raise _fail(a.loc, f"ManifoldMixup mixes module outputs; remove "
                                       f"'where: {a.where}' (attach it to \"\" to mix the "
                                       f"input)")
            for a in atts:
                if a.where == "params" and a.kind != "gradient":
                    raise _fail(a.loc, f"where: params takes a gradient transform "
                                       f"(ClipGradNorm, ClipGradValue, ScaleGrad, GradNoise); "
                                       f"{a.transform} acts on activations: remove 'where'")
            if vname in [v.name for v in variants]:
                raise _fail(loc, f"two variants are named {vname!r}; rename one")
            variants.append(Variant(vname, atts, str(loc), point))
    options["variants"] = tuple(variants)
    return AblationConfig(**options, source=source, locs=locs)


def load(path: str | Path, overrides: Sequence[Override] = ()) -> AblationConfig:
    """Read and validate a YAML ablation config, applying command-line ``overrides``."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder; give the YAML config file "
                          f"(e.g. examples/digits.yaml)")
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config ({e.strerror})") from None
    raw = _yaml_text(text, str(path))
    if raw is None:
        raise ConfigError(f"{path}: the config is empty; it needs model: and variants:")
    return parse(raw, str(path), overrides)

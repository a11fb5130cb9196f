"""Ablation configs: YAML in, validated :class:`AblationConfig` out. Private; see the CLI.

Every error names the file, line and column of the offending key or value (``ConfigError``),
and is raised before any training starts.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import schedules as S
from . import transforms as T

TRANSFORMS: dict[str, type[T.Transform]] = {
    cls.__name__: cls for cls in (T.DropBlock, T.Dropout2d, T.Dropout, T.DropPath,
                                  T.GaussianNoise, T.ClipGradValue, T.ClipGradNorm, T.ScaleGrad,
                                  T.GradNoise, T.ManifoldMixup)
}
SCHEDULES = ("linear", "cosine", "piecewise", "warmup")

# top-level key -> (type check, default)
DEFAULTS: dict[str, Any] = {
    "model": None,            # required: a timm model name or package.module:factory
    "model_kwargs": {},
    "data": "digits",
    "image_size": 32,
    "val_fraction": 0.2,
    "epochs": 10,
    "batch_size": 64,
    "optimizer": "sgd",       # sgd | adamw
    "lr": 0.05,
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "lr_schedule": "cosine",  # cosine | constant
    "label_smoothing": 0.0,
    "seeds": [0],
    "device": "auto",         # auto | cpu | cuda | cuda:N
    "out": "runs/ablation",
    "watch": "auto",          # layers whose statistics are recorded per epoch (auto: attached)
    "gradcam": "auto",        # {layer, images} for Grad-CAM overlays per variant, or false
    "variants": None,         # required
}
SPEC_KEYS = ("layers", "transform", "exclude", "where", "element")


class ConfigError(ValueError):
    """A bad ablation config; the message starts with ``file:line:column``."""


@dataclass
class Loc:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


def _fail(loc: Loc | None, msg: str) -> ConfigError:
    return ConfigError(f"{loc}: {msg}" if loc else msg)


def _to_python(node: yaml.Node, file: str) -> Any:
    """Convert a composed YAML node to Python values, remembering each value's location."""
    loc = Loc(file, node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        keys: dict = {}
        for k, v in node.value:
            key = _to_python(k, file)
            out[key] = _to_python(v, file)
            keys[key] = Loc(file, k.start_mark.line + 1, k.start_mark.column + 1)
        value: Any = _LocDict(out, loc, keys)
    elif isinstance(node, yaml.SequenceNode):
        value = _LocList([_to_python(v, file) for v in node.value], loc)
    else:
        value = yaml.SafeLoader("").construct_object(node, deep=True)
    return value


class _LocDict(dict):
    def __init__(self, data: dict, loc: Loc, keys: dict):
        super().__init__(data)
        self.loc = loc
        self.keys_loc = keys

    def at(self, key: Any) -> Loc:
        return self.keys_loc.get(key, self.loc)


class _LocList(list):
    def __init__(self, data: list, loc: Loc):
        super().__init__(data)
        self.loc = loc


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass
class TransformSpec:
    """One attachment of a variant: where, what, and the transform's arguments."""

    layers: Any
    transform: str
    kwargs: dict[str, Any]
    exclude: Any = None
    where: str = "output"
    element: Any = None
    loc: Loc | None = None
    layers_loc: Loc | None = None

    def build(self, total_steps: int) -> T.Transform:
        kwargs = {k: _schedule(v, total_steps) for k, v in self.kwargs.items()}
        return TRANSFORMS[self.transform](**kwargs)

    def describe(self) -> dict[str, Any]:
        out = {"layers": self.layers, "transform": self.transform, **self.kwargs}
        if self.exclude is not None:
            out["exclude"] = self.exclude
        if self.where != "output":
            out["where"] = self.where
        if self.element is not None:
            out["element"] = self.element
        return out


@dataclass
class AblationConfig:
    model: str
    variants: dict[str, list[TransformSpec]]
    options: dict[str, Any] = field(default_factory=dict)
    source: str = "<config>"

    def __getattr__(self, name: str) -> Any:
        options = self.__dict__.get("options", {})
        if name in options:
            return options[name]
        raise AttributeError(name)

    def resolved(self) -> dict[str, Any]:
        """The whole config with defaults filled in, as plain data (for results.json)."""
        return {"model": self.model, **{k: v for k, v in self.options.items()},
                "variants": {k: [s.describe() for s in v] for k, v in self.variants.items()}}

    def attached_layers(self) -> list:
        """The selectors of every forward-transform attachment of every variant."""
        out = []
        for specs in self.variants.values():
            for s in specs:
                if (issubclass(TRANSFORMS[s.transform], T.ForwardTransform) and s.where == "output"
                        and s.transform != "ManifoldMixup"):
                    for sel in (s.layers if isinstance(s.layers, list) else [s.layers]):
                        if sel not in out:
                            out.append(sel)
        return out

    @property
    def baseline(self) -> str:
        """The reference variant: ``baseline`` if present, else the first empty one, else the
        first."""
        if "baseline" in self.variants:
            return "baseline"
        for name, specs in self.variants.items():
            if not specs:
                return name
        return next(iter(self.variants))


def _schedule(value: Any, total_steps: int) -> Any:
    """A config value -> a number or a plugdrop schedule (steps default to the whole run)."""
    if not isinstance(value, dict) or "schedule" not in value:
        return value
    spec = dict(value)
    kind = spec.pop("schedule")
    if kind in ("linear", "cosine"):
        spec.setdefault("steps", total_steps)
        return getattr(S, kind)(**spec)
    if kind == "piecewise":
        points = spec.pop("points")
        return S.piecewise({int(k): v for k, v in points.items()}, **spec)
    if kind == "warmup":
        inner = _schedule(spec.pop("value"), total_steps)
        return S.warmup(inner, **spec)
    raise ValueError(f"unknown schedule {kind!r}")


def _check_schedules(value: Any, where: Loc) -> None:
    if isinstance(value, dict) and "schedule" in value:
        kind = value["schedule"]
        if kind not in SCHEDULES:
            raise _fail(where, f"unknown schedule {kind!r}; use one of {', '.join(SCHEDULES)}")
        try:
            _schedule(value, 1000)
        except (TypeError, ValueError, KeyError) as e:
            raise _fail(where, f"bad {kind} schedule {_plain(value)}: {e}") from None


def _suggest(name: str, options) -> str:
    close = difflib.get_close_matches(str(name), list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _parse_spec(raw: Any, loc: Loc) -> TransformSpec:
    if not isinstance(raw, dict):
        raise _fail(loc, "each attachment is a mapping like {layers: 'layer3.*', transform: "
                         "DropBlock, p: 0.1}")
    for key in ("layers", "transform"):
        if key not in raw:
            raise _fail(loc, f"attachment without {key!r}")
    name = raw["transform"]
    if name not in TRANSFORMS:
        raise _fail(raw.at("transform"), f"unknown transform {name!r}{_suggest(name, TRANSFORMS)}"
                                         f"; known: {', '.join(TRANSFORMS)}")
    cls = TRANSFORMS[name]
    params = inspect.signature(cls.__init__).parameters
    kwargs = {}
    for key, value in raw.items():
        if key in SPEC_KEYS:
            continue
        if key not in params or key == "self":
            known = [p for p in params if p != "self"] + list(SPEC_KEYS)
            raise _fail(raw.at(key), f"{name} has no setting {key!r}{_suggest(key, known)}; "
                                     f"it takes {', '.join(p for p in params if p != 'self')}")
        _check_schedules(value, raw.at(key))
        kwargs[key] = _plain(value)
    spec = TransformSpec(layers=_plain(raw["layers"]), transform=name, kwargs=kwargs,
                         exclude=_plain(raw.get("exclude")), where=raw.get("where", "output"),
                         element=raw.get("element"), loc=loc, layers_loc=raw.at("layers"))
    try:
        spec.build(1000)
    except (TypeError, ValueError) as e:
        raise _fail(loc, f"bad {name} settings: {e}") from None
    if spec.where not in ("output", "input", "params"):
        raise _fail(raw.at("where"), f"where must be output, input or params, got "
                                     f"{spec.where!r}")
    return spec


def _check_option(key: str, value: Any, loc: Loc) -> Any:
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise _fail(loc, f"{key} must be {what}, got {value!r}")

    if key in ("epochs", "batch_size", "image_size"):
        need(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
             "an integer >= 1")
    elif key in ("lr", "weight_decay", "momentum", "label_smoothing"):
        need(isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0,
             "a number >= 0")
    elif key == "val_fraction":
        need(isinstance(value, (int, float)) and 0 < value < 1, "a number in (0, 1)")
    elif key == "seeds":
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        need(isinstance(value, list) and value and all(isinstance(s, int) for s in value),
             "a list of integers")
    elif key == "optimizer":
        need(value in ("sgd", "adamw"), "'sgd' or 'adamw'")
    elif key == "lr_schedule":
        need(value in ("cosine", "constant"), "'cosine' or 'constant'")
    elif key in ("data", "model", "device", "out"):
        need(isinstance(value, str) and value != "", "a non-empty string")
    elif key == "model_kwargs":
        need(isinstance(value, dict), "a mapping")
    elif key == "watch":
        need(value is False or isinstance(value, (str, list)), "'auto', false, or a selector")
    elif key == "gradcam":
        if isinstance(value, str) and value != "auto":
            value = {"layer": value}
        if isinstance(value, dict):
            unknown = set(value) - {"layer", "images"}
            need(not unknown and isinstance(value.get("layer", ""), str)
                 and isinstance(value.get("images", 8), int), "{layer: NAME, images: N}")
        else:
            need(value in ("auto", False), "'auto', false, a layer name or {layer, images}")
    return _plain(value)


def parse(raw: Any, source: str = "<config>", overrides: dict[str, Any] | None = None
          ) -> AblationConfig:
    """Validate a loaded config (from :func:`load`) and apply command-line ``overrides``."""
    root_loc = getattr(raw, "loc", None)
    if not isinstance(raw, dict):
        raise _fail(root_loc, "the config must be a mapping of settings (model, data, variants...)")
    options: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in DEFAULTS:
            raise _fail(raw.at(key), f"unknown setting {key!r}{_suggest(key, DEFAULTS)}; known: "
                                     f"{', '.join(DEFAULTS)}")
        if key != "variants":
            options[key] = _check_option(key, value, raw.at(key))
    for key, value in (overrides or {}).items():
        if key not in DEFAULTS or key == "variants":
            raise ConfigError(f"command line: unknown setting {key!r}{_suggest(key, DEFAULTS)}")
        options[key] = _check_option(key, value, Loc("command line", 0, 0))
    if "model" not in options:
        raise _fail(root_loc, "the config needs 'model:' (a timm model name such as resnet18)")
    variants_raw = raw.get("variants")
    if not isinstance(variants_raw, dict) or not variants_raw:
        where = raw.at("variants") if "variants" in raw else root_loc
        raise _fail(where, "the config needs 'variants:', a mapping of name -> list of "
                           "attachments (an empty list is the baseline)")
    variants: dict[str, list[TransformSpec]] = {}
    for name, specs in variants_raw.items():
        loc = variants_raw.at(name)
        if specs is None:
            specs = []
        if not isinstance(specs, list):
            raise _fail(loc, f"variant {name!r} must be a list of attachments ([] for none)")
        variants[str(name)] = [_parse_spec(s, getattr(s, "loc", loc)) for s in specs]
        mixes = [s for s in variants[str(name)] if s.transform == "ManifoldMixup"]
        if len(mixes) > 1:
            raise _fail(mixes[1].loc, f"variant {name!r} has {len(mixes)} ManifoldMixup "
                                      f"attachments; use one with a list of layers")
    for key, default in DEFAULTS.items():
        if key not in ("model", "variants"):
            options.setdefault(key, default)
    model = options.pop("model")
    return AblationConfig(model=model, variants=variants, options=options, source=source)


def load(path: str | Path, overrides: dict[str, Any] | None = None) -> AblationConfig:
    """Read and validate a YAML ablation config."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e.strerror}") from None
    try:
        node = yaml.compose(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if node is None:
        raise ConfigError(f"{path}: the config is empty")
    return parse(_to_python(node, str(path)), str(path), overrides)

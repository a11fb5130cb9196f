"""The checks of the settings table (:mod:`.schema`): each takes the :class:`Value` of one
setting, raises a located one-line error naming what it must be, and returns the value
as the config carries it: plain numbers and words, or the typed values of :mod:`.types` and
:mod:`.metrics` (``ema: true`` -> ``0.9998``, ``checkpoint_every:
500steps`` -> ``Interval(500, "steps")``), so that no other room parses a setting again.

Generic checks are made by :func:`integer`, :func:`number`, :func:`choice`, :func:`boolean`
and :func:`text`; the rest are written for one setting each.
"""

from __future__ import annotations

import math

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeGuard

from ..errors import ConfigError
from .locations import Loc, LocDict, fail, plain, suggest
from .metrics import METRICS, unit_problem
from .spending import DEFAULT_SPENDING, Spending
from .types import CompileSpec, GradCamSpec, Interval

__all__ = ["Check", "Value", "boolean", "choice", "integer", "number", "text"]


class Value:
    """One setting's value under check: its key, its value (a check may replace it while it
    normalizes) and where it came from."""

    def __init__(self, key: str, value: Any, loc: Loc | None) -> None:
        self.key, self.value, self.loc = key, value, loc

    def need(self, ok: bool, what: str, hint: str = "") -> None:
        """Raise ``<key> must be <what>, got <value><hint>`` unless ``ok``."""
        if not ok:
            raise fail(self.loc, f"{self.key} must be {what}, got {plain(self.value)!r}{hint}")

    def at(self, key: Any) -> Loc | None:
        """Where ``key`` of a mapping value was given."""
        return self.value.at(key) if isinstance(self.value, LocDict) else self.loc

    def fail(self, msg: str) -> ConfigError:
        return fail(self.loc, msg)


Check = Callable[[Value], Any]



def is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def integer(low: int) -> Check:
    """An integer ``>= low``."""
    def check(v: Value) -> Any:
        v.need(is_int(v.value) and v.value >= low, f"an integer >= {low}")
        return v.value
    return check


def number(what: str, ok: Callable[[float], bool]) -> Check:
    """A number (int or float, not a bool) for which ``ok`` holds, as a float; ``what`` says
    which: ``"> 0"``, ``"in [0, 1)"``."""
    def check(v: Value) -> Any:
        v.need(is_num(v.value) and ok(v.value), f"a number {what}")
        return float(v.value)
    return check


def choice(*options: str, what: str | None = None, close: bool = False) -> Check:
    """One of ``options``; ``what`` says them (default ``a | b | c``); ``close``: suggest the
    nearest option."""
    def check(v: Value) -> Any:
        hint = suggest(v.value, options) if close and isinstance(v.value, str) else ""
        v.need(v.value in options, what or " | ".join(options), hint)
        return v.value
    return check


def boolean(v: Value) -> Any:
    v.need(isinstance(v.value, bool), "true or false")
    return v.value


def text(what: str) -> Check:
    """A non-empty string."""
    def check(v: Value) -> Any:
        v.need(isinstance(v.value, str) and v.value.strip() != "", what)
        return v.value
    return check


# --------------------------------------------------------------------- one setting each


def clip_grad(v: Value) -> Any:
    v.need(v.value is None or v.value is False or (is_num(v.value) and v.value > 0),
           "a number > 0 (the global gradient norm) or null")
    return float(v.value) if is_num(v.value) else None


def amp(v: Value) -> Any:
    if v.value is False or v.value is None:
        v.value = "off"
    v.need(v.value in ("off", "bf16", "fp16"), "off, bf16 or fp16")
    return v.value


def optimizer(v: Value) -> Any:
    import timm.optim

    known = timm.optim.list_optimizers()
    v.need(isinstance(v.value, str) and v.value.lower() in known,
           "a timm optimizer name (sgd, adamw, lamb, ...)",
           suggest(v.value, [str(k) for k in known]) if isinstance(v.value, str) else "")
    return v.value.lower()


def ema(v: Value) -> Any:
    if v.value is True:
        v.value = 0.9998
    elif v.value is False or v.value is None:
        v.value = None
    elif isinstance(v.value, Mapping):
        v.need(not set(v.value) - {"decay"} and "decay" in v.value,
               "true, false, a decay or {decay: 0.9998}")
        v.value = v.value["decay"]
    v.need(v.value is None or (is_num(v.value) and 0 < v.value < 1),
           "true, false or a decay in (0, 1) such as 0.9998")
    return v.value


_DEVICES = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def device(v: Value) -> Any:
    v.need(isinstance(v.value, str) and _DEVICES.fullmatch(v.value) is not None,
           "auto, cpu, cuda or cuda:N",
           " (did you mean 'cuda'?)" if v.value in ("gpu", "GPU", "cuda0") else "")
    return v.value


def model_kwargs(v: Value) -> Any:
    if v.value is None:
        v.value = {}
    v.need(isinstance(v.value, Mapping), "a mapping of keyword arguments, e.g. {drop_rate: 0.1}")
    return v.value


def pretrained(v: Value) -> Any:
    v.need(v.value is None or isinstance(v.value, bool)
           or (isinstance(v.value, str) and v.value != ""),
           "true (timm's cache), false, or the path of a checkpoint file")
    return None if v.value is False else v.value


def data(v: Value) -> Any:
    """What ``data:`` names, as a :class:`~plugdrop.ablate.data.DataSpec` (nothing read)."""
    from ..data import parse_data_spec

    written = plain(v.value)
    try:
        spec = parse_data_spec(written)
    except ConfigError as e:
        raise v.fail(str(e)) from None
    return replace(spec, written=written)


#: a number >= 0 (weight decay, learning rates)
NON_NEGATIVE = number(">= 0", lambda v: v >= 0)


def train_size(v: Value) -> Any:
    """``none`` (all of the training split), a whole number of images ``>= 1`` or a fraction
    in (0, 1); whether the data holds that many is checked when it is loaded."""
    v.need(v.value is None or (is_int(v.value) and v.value >= 1)
           or (isinstance(v.value, float) and 0 < v.value < 1),
           "a whole number of training images >= 1 (300), a fraction of the training split "
           "in (0, 1) (0.25), or none for all of it")
    return v.value


def workers(v: Value) -> Any:
    v.need(v.value == "auto" or (is_int(v.value) and v.value >= 0), "auto or an integer >= 0")
    return v.value


def eval_batch_size(v: Value) -> Any:
    v.need(v.value == "auto" or (is_int(v.value) and v.value >= 1), "auto or an integer >= 1")
    return v.value


def augment(v: Value) -> Any:
    if v.value is False:
        v.value = None
    if v.value is not None:
        from ..data import AUGMENT_KEYS

        v.need(isinstance(v.value, Mapping), "a mapping of timm transform settings")
        for k in v.value:
            if k not in AUGMENT_KEYS:
                raise fail(v.at(k), f"augment has no setting {k!r}"
                                    f"{suggest(k, sorted(AUGMENT_KEYS))}; known: "
                                    f"{', '.join(sorted(AUGMENT_KEYS))}")
    return v.value


def watch(v: Value) -> Any:
    ok = v.value in ("auto", False, None) or isinstance(v.value, str) or (
        isinstance(v.value, list) and all(isinstance(s, str) for s in v.value))
    v.need(ok, "auto, false, or a selector (a glob or a list of globs)")
    return False if v.value is None else v.value


def gradcam(v: Value) -> Any:
    """``auto``, false, or a :class:`~.types.GradCamSpec` (a layer name, ``{layer, images}``)."""
    if isinstance(v.value, str) and v.value != "auto":
        return GradCamSpec(layer=v.value)
    if isinstance(v.value, Mapping):
        unknown = set(v.value) - {"layer", "images"}
        if unknown:
            raise v.fail(f"gradcam has no setting {sorted(unknown)[0]!r}; it takes layer and "
                         f"images")
        images = v.value.get("images")
        if "images" in v.value and not (is_int(images) and images >= 1):
            raise fail(v.at("images"), f"gradcam images must be an integer >= 1, got "
                                       f"{images!r}; use gradcam: false for none")
        v.need(isinstance(v.value.get("layer", "auto"), str), "{layer: NAME, images: N}")
        return GradCamSpec(layer=v.value.get("layer"), images=images)
    v.need(v.value in ("auto", False, None), "auto, false, a layer name or {layer, images}")
    return False if v.value is None else v.value


def log(v: Value) -> Any:
    if v.value in (None, False):
        v.value = []
    if isinstance(v.value, str):
        v.value = [v.value]
    v.need(isinstance(v.value, list) and all(x == "tensorboard" for x in v.value),
           "a list of loggers: [tensorboard] or []")
    return tuple(v.value)


_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile_model(v: Value) -> Any:
    """``false`` | ``true`` (inductor) | a backend name | ``{backend, mode}`` ->
    ``false`` or a :class:`~.types.CompileSpec`."""
    import torch

    if v.value is None or v.value is False:
        return False
    if v.value is True:
        v.value = {"backend": CompileSpec.backend}
    elif isinstance(v.value, str):
        v.value = {"backend": v.value}
    v.need(isinstance(v.value, Mapping) and not set(v.value) - {"backend", "mode"},
           "true, false, a torch.compile backend or {backend: NAME, mode: MODE}")
    backend = v.value.get("backend", CompileSpec.backend)
    known = torch.compiler.list_backends(exclude_tags=())
    if backend not in known:
        raise fail(v.at("backend"), f"compile: {backend!r} is no torch.compile backend"
                                    f"{suggest(backend, known)}; this torch has "
                                    f"{', '.join(torch.compiler.list_backends())}")
    mode = v.value.get("mode")
    if mode is not None and mode not in _COMPILE_MODES:
        raise fail(v.at("mode"), f"compile mode must be one of {', '.join(_COMPILE_MODES)}, "
                                 f"got {mode!r}{suggest(mode, _COMPILE_MODES)}")
    return CompileSpec(backend, mode)


def decide_on(v: Value) -> Any:
    """One of :data:`~.metrics.METRICS`, or ``{metric: NAME, goal: max | min, unit: UNIT}``
    (any metric a program logs; ``goal`` may be left out for a metric plugdrop knows, ``unit``,
    the units the report names, for any other), as its :class:`~.metrics.Metric`."""
    if isinstance(v.value, Mapping):
        return _logged_metric(v)
    name = v.value if isinstance(v.value, str) else None
    hint = suggest(name, METRICS) if name is not None else ""
    if isinstance(v.value, list) and len(v.value) == 2:  # decide_on: [score, max]
        hint = f" (written {{metric: {v.value[0]}, goal: {v.value[1]}}}, not as a list?)"
    if name is None or name not in METRICS:
        v.need(False, " | ".join(METRICS) + ", or {metric: NAME, goal: max | min} for a "
               "metric a program logs", hint)
    return METRICS[str(name)]


def _logged_metric(v: Value) -> Any:
    from .metrics import Metric

    unknown = [k for k in v.value if k not in Metric.KEYS]
    if unknown:
        raise fail(v.at(unknown[0]), f"decide_on has no setting {unknown[0]!r}"
                                     f"{suggest(unknown[0], Metric.KEYS)}; it takes metric, "
                                     f"goal and unit")
    name, goal, unit = v.value.get("metric"), v.value.get("goal"), v.value.get("unit")
    if not isinstance(name, str) or not name.strip() or name in ("epoch", "step"):
        raise fail(v.at("metric"), f"decide_on metric must be the name of a metric the "
                                   f"program logs (a key of its metrics lines), got {name!r}")
    if goal is not None and goal not in Metric.GOALS:
        raise fail(v.at("goal"), f"decide_on goal must be max or min, got {goal!r}")
    if "unit" in v.value and (wrong := unit_problem(name, unit)) is not None:
        raise fail(v.at("unit"), wrong)
    known = METRICS.get(name)
    if known is not None:
        if goal is not None and Metric.GOALS[goal] != known.higher_is_better:
            raise fail(v.at("goal"), f"decide_on: {name} is better when "
                                     f"{'higher' if known.higher_is_better else 'lower'}: "
                                     f"goal {known.goal}, or leave goal out")
        return known
    if goal is None:
        raise fail(v.loc, f"decide_on: {name} is not a metric plugdrop knows: give its goal, "
                          f"{{metric: {name}, goal: max}} (higher is better) or goal: min")
    return Metric.logged(name, Metric.GOALS[goal], unit or "")


def margin(v: Value) -> Any:
    v.need(v.value == "auto" or (is_num(v.value) and 0 <= v.value < math.inf),
           "auto or a finite number >= 0 (an infinite margin calls every variant equivalent)")
    return v.value if v.value == "auto" else float(v.value)


def spending(v: Value) -> Any:
    """A spending function as :meth:`~.spending.Spending.parse` reads it, as its
    :class:`~.spending.Spending` (a typo: the nearest form suggested)."""
    if not isinstance(v.value, str):
        v.need(False, Spending.WHAT)
    try:
        return Spending.parse(v.value)
    except ValueError as e:
        if not str(e).startswith("unknown"):  # the right form, a value out of range
            raise v.fail(f"{v.key} {v.value!r}: {e}") from None
        text = v.value.strip().lower()
        named = next((form for words, form in _SPENDING_NAMES if any(w in text for w in words)),
                     None)
        v.need(False, Spending.WHAT, f" (did you mean {named!r}?)" if named else
               suggest(text, ("obf", "pocock", "hsd(-4)", str(DEFAULT_SPENDING))))
        raise  # not reached: need raised


#: spending functions by their authors' names -> the form the setting takes
_SPENDING_NAMES = ((("brien", "fleming"), "obf"), (("hwang", "decani", "shih"), "hsd(-4)"))


def checkpoint_every(v: Value) -> Any:
    """An :class:`~.types.Interval`, or false (at epoch ends only)."""
    if v.value is False or v.value is None:
        return False
    if not isinstance(v.value, str):
        v.need(False, Interval.WHAT, " (give a unit: 30min, 500steps)" if is_num(v.value) else "")
    try:
        return Interval.parse(v.value)
    except ValueError as e:
        v.need(False, str(e))
        raise  # not reached: need raised

"""The values of an attachment's settings: numbers, or schedules by name.

Transforms and schedules are looked up in the library itself (:func:`plugdrop.transforms.catalog`
and the lower-case factories of :mod:`plugdrop.schedules`), so a new transform or schedule can be
named in a spec at once.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from .. import schedules
from ..transforms import catalog
from ._yaml import Loc, LocDict, fail, plain, suggest

__all__ = ["PROBE_STEPS", "build_value", "check_schedule", "schedule_names", "steps_needed",
           "transform_names"]

#: The training's length a spec is checked with before the real one is known: long enough that
#: no warm-up written in a spec is refused for being longer than the training.
PROBE_STEPS = 10**9


def transform_names() -> dict[str, type]:
    """Every transform class the library exports, by name."""
    return dict(catalog())


def schedule_names() -> dict[str, Callable[..., Any]]:
    """Every schedule factory the library exports (``linear``, ``cosine``, ...), by name."""
    return {name: getattr(schedules, name) for name in sorted(schedules.__all__)
            if name[:1].islower() and inspect.isfunction(getattr(schedules, name))
            and name != "as_schedule"}


def build_value(value: Any, total_steps: int | None) -> Any:
    """A spec value -> a number, or a plugdrop schedule whose ``steps`` default to
    ``total_steps``.

    A schedule written without ``steps:`` spans the training: its warm-up counts among the
    ``total_steps``, as Hugging Face's and timm's schedulers count it. ``{schedule: cosine,
    start: 0, end: 0.1, warmup: 500}`` over 10000 steps is ``pd.cosine(0, 0.1, steps=9500,
    warmup=500)`` and reaches 0.1 at step 10000; the schedule a ``warmup`` schedule wraps
    spans what its warm-up leaves. A schedule with its own ``steps:`` keeps them: its ramp
    starts after its warm-up.

    ``times:`` multiplies by another value or schedule, e.g. a per-layer rate that also ramps
    with the step: ``{schedule: by_depth, start: 0, end: 0.1, times: {schedule: linear,
    start: 0, end: 1}}`` is ``pd.by_depth(0, 0.1) * pd.linear(0, 1, steps=<total_steps>)``.

    Raises:
        SpecError: a schedule without ``steps`` while ``total_steps`` is ``None``, or whose
            warm-up leaves none of the ``total_steps`` to its ramp.
        TypeError, ValueError, SettingError: what the schedule factory raises.
    """
    if not isinstance(value, Mapping) or "schedule" not in value:
        return value
    spec = dict(value)
    if "times" in spec:
        times = build_value(spec.pop("times"), total_steps)
        return build_value(spec, total_steps) * times
    kind = spec.pop("schedule")
    factory = schedule_names()[kind]
    params = inspect.signature(factory).parameters
    if "value" in spec and "value" not in params and "schedule" in params:
        spec["schedule"] = spec.pop("value")  # {schedule: warmup, value: ..., steps: ...}
    warm = spec.get("warmup", 0) if "warmup" in params else 0
    if "steps" in params and "steps" not in spec:
        if total_steps is None:
            raise fail(None, f"the {kind} schedule needs 'steps:' (the optimizer steps it "
                             f"spans); give it, or pass steps= to attach_all")
        spec["steps"] = total_steps
        if _count(warm):  # the warm-up is part of the training's steps
            if warm >= total_steps:
                raise fail(None, f"the {kind} schedule's warmup of {warm} steps leaves none "
                                 f"of the training's {total_steps} steps to its ramp; shorten "
                                 f"'warmup:' or give the ramp's own 'steps:'")
            spec["steps"] = total_steps - warm
    inner = total_steps
    if "schedule" in params and total_steps is not None and _count(spec.get("steps")):
        # a warmup schedule: what it wraps spans the steps after the warm-up
        inner = max(total_steps - spec["steps"], 1)
    spec = {k: build_value(v, inner if k == "schedule" else total_steps)
            for k, v in spec.items()}
    if kind == "piecewise" and isinstance(spec.get("points"), Mapping):
        spec["points"] = {int(k) if isinstance(k, str) and k.isdigit() else k: v
                          for k, v in spec["points"].items()}
    return factory(**spec)


def _count(value: Any) -> bool:
    """Whether ``value`` is a whole number of steps >= 1 (anything else is left to the
    schedule's own check)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def steps_needed(value: Any) -> str | None:
    """The name of the first schedule in ``value`` that takes its length from the training
    (written without ``steps:``), or ``None`` when ``value`` needs no training length."""
    if not isinstance(value, Mapping):
        return None
    kind = value.get("schedule")
    factory = schedule_names().get(kind) if isinstance(kind, str) else None
    if factory is not None and "steps" in inspect.signature(factory).parameters and (
            "steps" not in value):
        return str(kind)
    for k, v in value.items():
        if k != "schedule" or isinstance(v, Mapping):
            found = steps_needed(v)
            if found is not None:
                return found
    return None


def check_schedule(value: Any, loc: Loc | None) -> None:
    """Raise a located :class:`~plugdrop.SpecError` for an unknown schedule, a setting it does
    not take, or values it rejects; a value that is no schedule passes."""
    if isinstance(value, Mapping) and "schedule" in value:
        kind = value["schedule"]
        known = schedule_names()
        if kind not in known:
            raise fail(loc, f"unknown schedule {kind!r}{suggest(kind, known)}; use one of "
                            f"{', '.join(known)}")
        params = [p for p in inspect.signature(known[kind]).parameters]
        for k in value:
            if k not in ("schedule", "times") and k not in params and not (
                    k == "value" and "schedule" in params):
                raise fail(value.at(k) if isinstance(value, LocDict) else loc,
                           f"the {kind} schedule has no setting {k!r}{suggest(k, params)}; "
                           f"it takes {', '.join(params)}")
        for k, v in value.items():
            if k != "schedule":
                check_schedule(v, value.at(k) if isinstance(value, LocDict) else loc)
        try:
            build_value(plain(value), PROBE_STEPS)
        except (TypeError, ValueError, KeyError) as e:
            raise fail(loc, f"bad {kind} schedule {plain(value)}: {e}") from None

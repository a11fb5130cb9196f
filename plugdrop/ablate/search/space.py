"""The ``search:`` block of a config: the budget, the sampler and the space, a list of
attachments like a variant's in which any value may be a searched dimension::

    search:
      budget: 80                      # runs in all, the confirmation included
      sampler: tpe                    # or {name: tpe, n_startup_trials: 5}; random, qmc, gp
      seed: 0                         # the sampler's seed
      parallel: 1                     # candidates proposed (and racing) at once
      space:
        - {layers: {choice: ["layer2.*", "layer3.*"]}, transform: DropBlock,
           p: {range: [0.02, 0.3], log: true}, block_size: {choice: [3, 5, 7]}}

A dimension is ``{choice: [values]}`` or ``{range: [lo, hi]}`` (with ``log: true`` and / or
``int: true``), anywhere inside an attachment (a schedule's ``end:`` too). Every mistake is a
:class:`~plugdrop.ablate.errors.ConfigError` naming ``file:line:column``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config.locations import LocDict, LocList, fail, plain, suggest
from ..errors import ConfigError

__all__ = ["KEYS", "SAMPLERS", "Dimension", "SearchSpec", "check_budget", "parse_search",
           "substitute"]

#: the keys of ``search:``
KEYS = ("budget", "space", "sampler", "seed", "parallel")
#: the samplers ``sampler:`` names, and Optuna's class for each
SAMPLERS = {"tpe": "TPESampler", "random": "RandomSampler", "qmc": "QMCSampler",
            "gp": "GPSampler", "cmaes": "CmaEsSampler"}
#: significant digits of a float a range proposes: 1e-4 relative, far below what a search's
#: seeds can tell apart, and a value a person can read and type
SIGNIFICANT = 4
#: the TPE sampler's start-up trials unless given: searches of plugdrop have tens of candidates
TPE_STARTUP = 5

Path = tuple[Any, ...]


@dataclass(frozen=True)
class Dimension:
    """One searched value: ``path`` inside the space (attachment index, then keys), its
    ``name`` (the Optuna parameter), and either ``choices`` or ``low``/``high`` (``log``,
    ``integer``)."""

    name: str
    path: Path
    loc: str
    choices: tuple[Any, ...] | None = None
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    integer: bool = False

    @property
    def labels(self) -> tuple[Any, ...]:
        """What Optuna sees of the choices: scalars as they are, others as JSON text."""
        assert self.choices is not None
        return tuple(c if c is None or isinstance(c, (bool, int, float, str))
                     else json.dumps(c, sort_keys=True) for c in self.choices)

    def value(self, param: Any) -> Any:
        """The attachment's value for Optuna's ``param``: a choice, an integer, or a float to
        ``SIGNIFICANT`` digits (what trains is what ``best.yaml`` and the report show; Optuna's
        study keeps its own value)."""
        if self.choices is None:
            return int(param) if self.integer else float(f"{float(param):.{SIGNIFICANT}g}")
        return self.choices[self.labels.index(param)]

    def probes(self) -> list[Any]:
        """The values every candidate may take at the edges: each choice, or both ends."""
        if self.choices is not None:
            return list(self.choices)
        return [int(self.low), int(self.high)] if self.integer else [self.low, self.high]

    def describe(self) -> dict[str, Any]:
        if self.choices is not None:
            return {"name": self.name, "choice": list(self.choices)}
        return {"name": self.name, "range": [self.low, self.high], "log": self.log,
                "int": self.integer}


@dataclass(frozen=True)
class SearchSpec:
    """The ``search:`` block, checked."""

    budget: int
    space: Any  # the attachments as read (LocList of LocDicts), dimensions in place
    dimensions: tuple[Dimension, ...]
    sampler: str = "tpe"
    sampler_options: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    parallel: int = 1
    loc: str = ""
    locs: Mapping[str, str] = field(default_factory=dict)

    def at(self, key: str) -> str:
        """Where ``key`` of the block was given (the block's own place when not)."""
        return self.locs.get(key, self.loc)

    def plain(self) -> dict[str, Any]:
        """The block as plain data (what the search's fingerprint and ``search.json`` keep)."""
        return {"budget": self.budget, "space": plain(self.space),
                "sampler": {"name": self.sampler, **dict(self.sampler_options)},
                "seed": self.seed, "parallel": self.parallel}

    def attachments(self, params: Mapping[str, Any]) -> list[Any]:
        """The space with every dimension set from Optuna's ``params`` (locations kept)."""
        return substitute(self.space, {d.path: d.value(params[d.name])
                                       for d in self.dimensions})


def _is_dimension(value: Any) -> bool:
    return isinstance(value, Mapping) and ("choice" in value or "range" in value)


def _dimension(value: Mapping[str, Any], loc: Any, path: Path, name: str) -> Dimension:
    at = value.at if isinstance(value, LocDict) else (lambda k: loc)
    kind = "choice" if "choice" in value else "range"
    allowed = {"choice"} if kind == "choice" else {"range", "log", "int"}
    for key in value:
        if key not in allowed:
            raise fail(at(key), f"{name}: a {kind} takes {', '.join(sorted(allowed))}, not "
                                f"{key!r}{suggest(key, allowed)}")
    if kind == "choice":
        choices = value["choice"]
        if not isinstance(choices, list) or not choices:
            raise fail(at("choice"), f"{name}: a choice is {{choice: [value, value, ...]}} "
                                     f"with at least one value")
        if any(_is_dimension(c) for c in choices):
            raise fail(at("choice"), f"{name}: a choice's values are plain values, not "
                                     f"choices or ranges")
        texts = [json.dumps(plain(c), sort_keys=True) for c in choices]
        if len(set(texts)) < len(texts):
            raise fail(at("choice"), f"{name}: the choice names a value twice")
        return Dimension(name, path, str(loc), tuple(plain(c) for c in choices))
    ends = value["range"]
    log, integer = value.get("log", False), value.get("int", False)
    for key, flag in (("log", log), ("int", integer)):
        if not isinstance(flag, bool):
            raise fail(at(key), f"{name}: {key} is true or false, not {flag!r}")
    if (not isinstance(ends, list) or len(ends) != 2
            or not all(isinstance(e, (int, float)) and not isinstance(e, bool)
                       and math.isfinite(e) for e in ends)):
        raise fail(at("range"), f"{name}: a range is {{range: [low, high]}} with two numbers")
    low, high = float(ends[0]), float(ends[1])
    if not low < high:
        raise fail(at("range"), f"{name}: the range's low end must lie below its high end, "
                                f"got [{ends[0]}, {ends[1]}]")
    if log and low <= 0:
        raise fail(at("range"), f"{name}: a range with log: true needs a low end above 0, "
                                f"got {ends[0]}")
    if integer and not (low.is_integer() and high.is_integer()):
        raise fail(at("range"), f"{name}: a range with int: true needs whole ends, got "
                                f"[{ends[0]}, {ends[1]}]")
    return Dimension(name, path, str(loc), None, low, high, log, integer)


def _walk(value: Any, loc: Any, path: Path, out: list[Dimension]) -> None:
    """Collect the dimensions inside ``value`` (given at ``loc``), in the file's order."""
    if isinstance(value, Mapping):
        if "grid" in value:
            raise fail(loc, f"search.space.{_name(path)}: a search space takes {{choice: [...]}} or "
                            f"{{range: [low, high]}}, not a grid")
        for key, v in value.items():
            kloc = value.at(key) if isinstance(value, LocDict) else loc
            if _is_dimension(v):
                out.append(_dimension(v, kloc, (*path, key),
                                      "search.space." + _name((*path, key))))
            else:
                _walk(v, kloc, (*path, key), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _walk(v, getattr(v, "loc", None) or loc, (*path, i), out)


def _name(path: Path) -> str:
    return ".".join(str(p) for p in path)


def substitute(value: Any, at: Mapping[Path, Any], path: Path = ()) -> Any:
    """``value`` with the values of ``at`` (path -> value) put in, keeping every location."""
    if path in at:
        return at[path]
    if isinstance(value, Mapping):
        data = {k: substitute(v, at, (*path, k)) for k, v in value.items()}
        return LocDict(data, value.loc, value.keys_loc) if isinstance(value, LocDict) else data
    if isinstance(value, list):
        items = [substitute(v, at, (*path, i)) for i, v in enumerate(value)]
        return LocList(items, value.loc) if isinstance(value, LocList) else items
    return value


def _integer(raw: Mapping[str, Any], key: str, loc: Any, default: int | None, least: int
             ) -> int:
    if key not in raw:
        if default is None:
            raise fail(loc, f"search: needs {key}: (the runs in all, the confirmation "
                            f"included)")
        return default
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise fail(raw.at(key) if isinstance(raw, LocDict) else loc,
                   f"search.{key}: a whole number of at least {least}, got {value!r}")
    return value


def _sampler(raw: Any, loc: Any) -> tuple[str, dict[str, Any]]:
    options: dict[str, Any] = {}
    if isinstance(raw, Mapping):
        if "name" not in raw:
            raise fail(loc, "search.sampler: give {name: tpe, ...options}, or a name")
        options = {str(k): plain(v) for k, v in raw.items() if k != "name"}
        if "seed" in options:
            raise fail(loc, "search.sampler: the seed is search.seed, not a sampler option")
        raw = raw["name"]
    if not isinstance(raw, str) or raw.lower() not in SAMPLERS:
        raise fail(loc, f"search.sampler: {raw!r} is no sampler; give one of "
                        f"{', '.join(SAMPLERS)}{suggest(raw, SAMPLERS)}")
    return raw.lower(), options


def parse_search(raw: Any, loc: Any) -> SearchSpec:
    """The ``search:`` block (given at ``loc``), checked; its attachments' own settings are
    checked later, with the config (:mod:`.setup`).

    Raises:
        ConfigError: anything wrong, with its ``file:line:column``.
    """
    if not isinstance(raw, Mapping):
        raise fail(loc, "search: a mapping with budget: and space: (and optionally sampler:, "
                        "seed:, parallel:)")
    at = raw.at if isinstance(raw, LocDict) else (lambda k: loc)
    for key in raw:
        if key not in KEYS:
            raise fail(at(key), f"search: unknown key {key!r}{suggest(key, KEYS)}; known: "
                                f"{', '.join(KEYS)}")
    budget = _integer(raw, "budget", loc, None, 1)
    seed = _integer(raw, "seed", loc, 0, 0)
    parallel = _integer(raw, "parallel", loc, 1, 1)
    sampler, options = _sampler(raw.get("sampler", "tpe"), at("sampler"))
    space = raw.get("space")
    sloc = at("space") if "space" in raw else loc
    if not isinstance(space, list) or not space:
        raise fail(sloc, "search.space: a list of attachments, as a variant's, whose values "
                         "may be {choice: [...]} or {range: [low, high]}")
    dims: list[Dimension] = []
    for i, att in enumerate(space):
        aloc = getattr(att, "loc", None) or sloc
        if not isinstance(att, Mapping):
            raise fail(aloc, f"search.space: attachment {i} is not a mapping of layers, "
                             f"transform and settings")
        _walk(att, aloc, (i,), dims)
    if not dims:
        raise fail(sloc, "search.space: nothing to search: give at least one value as "
                         "{choice: [...]} or {range: [low, high]}")
    # Optuna's names: the keys' path (with one attachment, without its index)
    dims = [Dimension(_name(d.path[1:] if len(space) == 1 else d.path), d.path, d.loc,
                      d.choices, d.low, d.high, d.log, d.integer) for d in dims]
    locs = {str(k): str(at(k)) for k in raw}
    return SearchSpec(budget, space, tuple(dims), sampler, options, seed, parallel, str(loc),
                      locs)


def check_budget(spec: SearchSpec, seeds_min: int, seeds_max: int) -> None:
    """A budget that leaves room for the confirmation, the baseline and one candidate."""
    least = 2 * seeds_max + 2 * seeds_min
    if spec.budget < least:
        raise ConfigError(f"{spec.at('budget')}: search.budget {spec.budget} is too small: the "
                          f"confirmation keeps up to {2 * seeds_max} runs (the best and the "
                          f"baseline on {seeds_max} fresh seeds) and a candidate needs "
                          f"{seeds_min} runs paired with the baseline's; give at least "
                          f"{least}")

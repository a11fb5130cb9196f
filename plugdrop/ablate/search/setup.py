"""A search's config: an ablation config with a ``search:`` block. Read with the place of every
value, the block checked (:mod:`.space`), the rest checked as an ablation config, and every
value of every dimension checked as an attachment before anything trains; then, round after
round, the ablation config of the candidates so far (:func:`SearchConfig.ablation`), which the
run folders in ``OUT/trials`` train under, through the runner's own launchers and jobs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import config
from ..config import AblationConfig
from ..config.locations import Loc, LocDict, fail, plain, yaml_text
from ..decide.race import RaceSetup
from ..errors import ConfigError
from .space import SearchSpec, check_budget, parse_search, substitute

__all__ = ["BASELINE", "SearchConfig", "load_search", "loads_search", "setup_of"]

#: the reference variant of a search
BASELINE = "baseline"


@dataclass(frozen=True)
class SearchConfig:
    """A checked search config.

    Attributes:
        base: the ablation config without ``search:`` (its variants: the baseline).
        spec: the ``search:`` block.
        raw: the config as read (locations kept), without ``search:``.
        search_seeds: the seeds the candidates race on.
        confirm_first: the first of the fresh seeds of the confirmation.
        seeds_min, seeds_max, seeds_step: the adaptive design's seeds per candidate.
    """

    base: AblationConfig
    spec: SearchSpec
    raw: Any
    search_seeds: tuple[int, ...]
    confirm_first: int
    seeds_min: int
    seeds_max: int
    seeds_step: int

    @property
    def baseline(self) -> list[Any]:
        return list(self.raw["variants"][BASELINE] or [])

    @property
    def confirm_seeds(self) -> tuple[int, ...]:
        return tuple(range(self.confirm_first, self.confirm_first + self.seeds_max))

    def fingerprint(self) -> str:
        """What a resumed search must share with the one that started the folder: every
        setting that changes results and the ``search:`` block."""
        # the judging settings in too: a search proposes by its metric (as before 0.2)
        data = {"config": self.base.judged_hash(), "search": self.spec.plain()}
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()
                              ).hexdigest()[:16]

    def ablation(self, variants: Mapping[str, Sequence[Any]], out: Path) -> AblationConfig:
        """The ablation config of ``variants`` (the baseline first) over every seed the search
        may use, trained into ``out``: what the run folders and the jobs read."""
        raw = {k: plain(v) for k, v in self.raw.items()}
        raw["variants"] = {BASELINE: plain(self.baseline),
                           **{n: plain(list(a)) for n, a in variants.items()}}
        raw["seeds"] = [*self.search_seeds, *self.confirm_seeds]
        raw["out"] = str(out)
        try:
            return config.parse(raw, self.base.source)
        except ConfigError as e:  # the checks of the space passed: say so, do not hide it
            raise ConfigError(f"a candidate's config fails its checks: {e}") from None


def setup_of(sc: SearchConfig) -> RaceSetup:
    """The race's view of a search config: its seeds, budget, decision rule and baseline."""
    return RaceSetup(sc.search_seeds, sc.seeds_min, sc.seeds_max, sc.seeds_step,
                     sc.confirm_first, sc.spec.budget, sc.spec.parallel, sc.base.decision,
                     BASELINE)


def _split(raw: Any, source: str) -> tuple[Any, Any, Any]:
    if not isinstance(raw, LocDict):
        raise ConfigError(f"{source}: the config must be a mapping of settings with a search: "
                          f"block")
    if "search" not in raw:
        raise fail(raw.loc, "no search: block: plugdrop search needs search: {budget: N, "
                            "space: [...]} (plugdrop ablate runs a config without one)")
    rest = LocDict({k: v for k, v in raw.items() if k != "search"}, raw.loc,
                   {k: v for k, v in raw.keys_loc.items() if k != "search"})
    return rest, raw["search"], raw.at("search")


def _with_variants(rest: LocDict, variants: Mapping[str, Any], loc: Loc) -> LocDict:
    vloc = rest.at("variants") if "variants" in rest else loc
    keys = dict(rest["variants"].keys_loc) if isinstance(rest.get("variants"), LocDict) else {}
    out = LocDict(dict(rest), rest.loc, rest.keys_loc)
    out["variants"] = LocDict(dict(variants), vloc, keys)
    return out


def _check_space(rest: LocDict, spec: SearchSpec, source: str) -> None:
    """Every value each dimension may take, the others at their first value, checked as an
    attachment of a variant (transforms, settings, schedules), named by its place."""
    first = {d.path: d.probes()[0] for d in spec.dimensions}
    probes: dict[str, Any] = {BASELINE: rest["variants"][BASELINE]}
    for d in spec.dimensions:
        for value in d.probes():
            probes[f"candidate-{len(probes)}"] = _substituted(spec, {**first, d.path: value})
    config.parse(_with_variants(rest, probes, rest.loc), source)


def _substituted(spec: SearchSpec, at: Mapping[Any, Any]) -> Any:
    return substitute(spec.space, at)


def loads_search(text: str, source: str = "<config>") -> SearchConfig:
    """Read and check a search config given as text (``source`` names it in errors).

    Raises:
        ConfigError: a mistake in the config or its ``search:`` block (one line, with its
            ``file:line:column``).
    """
    raw = yaml_text(text, source)
    if raw is None:
        raise ConfigError(f"{source}: the config is empty; it needs search: and, for plugdrop's "
                          f"trainer, model:")
    rest, block, bloc = _split(raw, source)
    spec = parse_search(block, bloc)
    if "variants" not in rest:
        rest = _with_variants(rest, {BASELINE: []}, rest.loc)
    variants = rest["variants"]
    if not isinstance(variants, Mapping) or BASELINE not in variants:
        raise fail(rest.at("variants"), "a search compares its candidates with "
                                        "variants.baseline: give variants: {baseline: []} "
                                        "(the attachments every candidate is compared with)")
    others = [k for k in variants if k != BASELINE]
    if others:
        raise fail(rest.at("variants"), f"a search's variants hold the baseline only (the "
                                        f"candidates come from search.space); remove "
                                        f"{', '.join(map(repr, others))}")
    rest = _with_variants(rest, {BASELINE: variants[BASELINE]}, rest.loc)
    base = config.parse(rest, source)
    plan = base.plan
    if plan is not None:
        seeds, lo, hi, step = tuple(plan.seeds()), plan.min, plan.max, plan.step
    else:
        seeds = tuple(base.seed_list)
        lo = hi = len(seeds)
        step = 1
        if hi < 2:
            raise fail(base.loc("seeds"), "a search pairs at least 2 seeds per candidate: give "
                                          "seeds: {min: 3, max: 6} (an adaptive design)")
    check_budget(spec, lo, hi)
    _check_space(rest, spec, source)
    _check_sampler(spec)
    return SearchConfig(base, spec, rest, seeds, max(seeds) + 1, lo, hi, step)


def _check_sampler(spec: SearchSpec) -> None:
    from .proposals import check_sampler

    check_sampler(spec)  # options it does not take, or values it fails on: one line


def load_search(path: str | Path) -> SearchConfig:
    """Read and check the search config at ``path``."""
    return loads_search(config.read_config(path), str(path))

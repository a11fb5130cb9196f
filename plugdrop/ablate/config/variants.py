"""Variants: named lists of attachments (``[]`` is the baseline), grids expanded into one
variant per combination (``dropblock[p=0.1,block_size=5]``), and the checks that need a whole
variant (how its coordinated transforms and parameter attachments fit together)."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .attachments import Attachment, check_together, parse_attachment
from .locations import Loc, LocDict, fail, loc_of, plain

__all__ = ["VARIANT_NAME", "Variant", "attached_layers", "parse_variants"]

#: what a variant name may contain (it becomes a folder name)
VARIANT_NAME = re.compile(r"[A-Za-z0-9_.,=+\[\]-]+")
_USER_VARIANT = re.compile(r"[A-Za-z0-9_.+-]+")


@dataclass(frozen=True)
class Variant:
    """A named list of attachments (empty: the baseline)."""

    name: str
    attachments: tuple[Attachment, ...]
    loc: str = ""
    grid: Mapping[str, Any] = field(default_factory=dict)


def attached_layers(variants: Iterable[Variant]) -> list[Any]:
    """The selectors of every per-layer forward transform attached to outputs in any of
    ``variants``, in order, without duplicates; coordinated transforms (mixing) are left out."""
    out: list[Any] = []
    for v in variants:
        for a in v.attachments:
            if a.kind == "forward" and a.where == "output" and not a.coordinated:
                for sel in (a.layers if isinstance(a.layers, list) else [a.layers]):
                    if sel not in out:
                        out.append(sel)
    return out


def _grid_keys(specs: list[Any]) -> list[tuple[int, str, list[Any], Loc | None]]:
    out = []
    for i, raw in enumerate(specs):
        if not isinstance(raw, Mapping):
            continue
        for key, value in raw.items():
            if isinstance(value, Mapping) and "grid" in value:
                vloc = loc_of(value, raw.at(key) if isinstance(raw, LocDict) else None)
                values = value["grid"]
                if len(value) != 1 or not isinstance(values, list) or not values:
                    raise fail(vloc, f"{key}: a grid is {{grid: [value, value, ...]}} with at "
                                     f"least one value")
                out.append((i, str(key), list(values), vloc))
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list)):
        return json.dumps(plain(value), separators=(",", ":"))
    return str(value)


def _expand(name: str, specs: list[Any]) -> list[tuple[str, list[Any], dict[str, Any]]]:
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
            if isinstance(s, LocDict):
                new[j] = LocDict(new[j], s.loc, s.keys_loc)
        point = {lab: plain(v) for lab, v in zip(labels, combo)}
        vname = f"{name}[{','.join(f'{k}={_fmt(v)}' for k, v in point.items())}]"
        if not VARIANT_NAME.fullmatch(vname):
            raise fail(grids[0][3], f"grid values must be plain numbers or words to name the "
                                    f"variants; {vname!r} is not a folder-safe name")
        out.append((vname, new, point))
    return out


def parse_variants(raw: Any, loc: Loc) -> tuple[Variant, ...]:
    """The ``variants:`` mapping (given at ``loc``) -> variants, grids expanded, in the file's
    order.

    Raises:
        ConfigError: a missing or empty mapping, a bad name, an attachment that is not one, a
            grid that names no folder, two variants of one name, or attachments that do not
            fit together.
    """
    if not isinstance(raw, Mapping) or not raw:
        raise fail(loc, "the config needs 'variants:', a mapping of name -> list of attachments "
                   "(an empty list is the baseline)")
    variants: list[Variant] = []
    at = raw.at if isinstance(raw, LocDict) else (lambda k: loc)
    for name, specs in raw.items():
        vloc = at(name)
        if not isinstance(name, str) or not _USER_VARIANT.fullmatch(name):
            raise fail(vloc, f"variant name {name!r}: use letters, digits and _ . + - only "
                            f"(it names a folder)")
        if specs is None:
            specs = []
        if not isinstance(specs, list):
            raise fail(vloc, f"variant {name!r} must be a list of attachments ([] for none)")
        for vname, vspecs, point in _expand(name, specs):
            atts = tuple(parse_attachment(s, loc_of(s, vloc), name) for s in vspecs)
            check_together(name, atts)
            if vname in [v.name for v in variants]:
                raise fail(vloc, f"two variants are named {vname!r}; rename one")
            variants.append(Variant(vname, atts, str(vloc), point))
    return tuple(variants)

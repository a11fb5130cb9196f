"""Command-line changes of a config: ``--set KEY=VALUE`` (Hydra-style dotted paths into nested
mappings and lists: ``--set variants.dropblock.0.p=0.2``) and the dedicated flags
(``--epochs 5``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from ..errors import ConfigError
from .locations import Loc, LocDict, LocList, fail, plain, suggest, yaml_text

__all__ = ["Override", "apply", "flag", "parse_overrides", "restored_override", "stored_override"]


@dataclass(frozen=True)
class Override:
    """A command-line change of one setting: ``path`` into the config, the new value;
    ``merge``: a key of a mapping that the flag makes (``--seeds-min 3`` turns a list of
    seeds into ``{min: 3}``)."""

    path: str
    value: Any
    label: str
    merge: bool = False


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
        value = yaml_text(text, "--set", label) if text.strip() else None
        out.append(Override(key, value, label))
    return out


def flag(name: str, key: str, value: Any) -> Override:
    """An override from a dedicated flag such as ``--epochs`` (``key`` ``seeds.min``: a key
    of a mapping setting, made into a mapping when it is not one)."""
    if isinstance(value, list):
        value = LocList(value, Loc(name))
    return Override(key, value, name, merge="." in key)


def stored_override(ov: Override) -> dict[str, Any]:
    """``ov`` as plain JSON data (what :func:`restored_override` reads back)."""
    return {"path": ov.path, "value": plain(ov.value), "label": ov.label, "merge": ov.merge}


def restored_override(data: Any, where: str) -> Override:
    """The :class:`Override` that :func:`stored_override` wrote, its values given the place
    of the option they came from (``--set KEY``, ``--epochs``) as before.

    Raises:
        ConfigError: ``data`` (read from ``where``) is not such a record.
    """
    if not (isinstance(data, dict) and isinstance(data.get("path"), str)
            and isinstance(data.get("label"), str) and isinstance(data.get("merge"), bool)):
        raise ConfigError(f"{where}: a command-line override there is not one written by "
                          f"plugdrop ({str(data)[:80]})")
    value = data.get("value")
    if value is not None:
        try:
            text = yaml.safe_dump(value)
        except yaml.YAMLError:
            raise ConfigError(f"{where}: the value of {data['label']} there is not plain "
                              f"data") from None
        value = yaml_text(text, data["label"], data["label"])
    return Override(data["path"], value, data["label"], data["merge"])


def apply(raw: LocDict, ov: Override) -> None:
    """Set ``ov``'s value at its path in the loaded config ``raw`` (in place)."""
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
                if not last and not ov.merge:
                    raise fail(loc, f"no setting {'.'.join(parts[:i + 1])!r}"
                                    f"{suggest(key, [str(k) for k in node])}")
            if not last and ov.merge and not isinstance(node.get(key), dict):
                node[key] = LocDict({}, loc, {})
            if last:
                node[key] = ov.value
                if isinstance(node, LocDict):
                    node.keys_loc[key] = loc
                return
            node = node[key]
        elif isinstance(node, list):
            seg = parts[i]
            if not seg.isdigit() or int(seg) >= len(node):
                raise fail(loc, f"{'.'.join(parts[:i])} is a list of {len(node)}; "
                                f"{seg!r} is no index in it (0..{len(node) - 1})")
            if last:
                node[int(seg)] = ov.value
                return
            node = node[int(seg)]
        else:
            raise fail(loc, f"{'.'.join(parts[:i])} is a value, not a mapping or list")
        i += 1

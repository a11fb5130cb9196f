"""What a study folder's ``ablation.json`` says beyond its runs: the report's sections its
program supplies, what trained the runs, the hashes its runs may record, and how the config
judges otherwise than the one recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..config import AblationConfig, judging

__all__ = ["accepted_hashes", "changed", "sections_of", "trains_of"]


def _doc(out: Path) -> Any:
    try:
        return json.loads((out / "ablation.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def changed(recorded: dict[str, Any], cfg: AblationConfig) -> dict[str, Any]:
    """The settings that only judge whose value in ``cfg`` differs from the recorded
    config's (an older folder's missing ones left out)."""
    now = cfg.resolved()
    return {k: {"from": recorded[k], "to": now.get(k)} for k in judging()
            if k in recorded and recorded[k] != now.get(k)}


def accepted_hashes(out: Path, config_hash: str) -> tuple[str, ...]:
    """The config hashes the runs of ``out`` may record: ``config_hash`` and the
    ``earlier_hashes`` of its ``ablation.json`` (the hash an earlier version computed)."""
    doc = _doc(out)
    earlier = doc.get("earlier_hashes") if isinstance(doc, dict) else None
    earlier = earlier if isinstance(earlier, list) else []
    return (config_hash, *(h for h in earlier if isinstance(h, str) and h != config_hash))


#: the sections of a folder that records none (an older plugdrop's): its program's
_OLD_SECTIONS = {"program": ("logged",), "trainer": ("epochs", "calibration", "drop_fraction",
                                                     "gradcam")}


def sections_of(doc: dict[str, Any]) -> tuple[str, ...]:
    """The report's sections ``ablation.json`` records (an older folder: its program's)."""
    got = doc.get("sections")
    if isinstance(got, list) and all(isinstance(x, str) for x in got):
        return tuple(got)
    return _OLD_SECTIONS["program" if isinstance(doc.get("program"), dict) else "trainer"]


def trains_of(doc: dict[str, Any], cfg: AblationConfig) -> str:
    """What trained the runs, as ``ablation.json`` records it (an older folder: from its
    config and data)."""
    got = doc.get("trains")
    if isinstance(got, str):
        return got
    if cfg.program is not None:
        return f"program {cfg.program} (in {cfg.cwd})"
    data = doc.get("data")
    name = data.get("name", "?") if isinstance(data, dict) else "?"
    return f"{cfg.model} on {name}"



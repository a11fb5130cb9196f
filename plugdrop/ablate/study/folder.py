"""A study's folder: claimed under its lock, and its record written in one shape for every
strategy.

``OUT/ablation.json`` (the manifest: the resolved config, its hash, the strategy, every run the
jobs may train, the versions, what the program records) and ``OUT/.config.json`` (the config
as plain data, what the jobs read back) are written by :func:`record`, once for an ablation,
each round for a search (whose run folders live in ``OUT/trials`` and whose config grows with
its candidates). :func:`claim_ablation` decides whether a folder may receive an ablation (a
search has its own record, :mod:`.search`).
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .. import config, runs
from ..config import AblationConfig
from ..errors import ConfigError
from ..launch.shard import check_fresh
from ..programs import Program
from ..train import Dist

__all__ = ["SEARCH_RECORD", "claim_ablation", "manifest", "record", "versions"]

#: the record of a search folder (what ``--resume`` is held to): an ablation refuses it
SEARCH_RECORD = "search-config.json"


def versions() -> dict[str, str]:
    """The versions of Python and of the packages a result depends on."""
    out = {"python": sys.version.split()[0], "torch": torch.__version__}
    for name in ("plugdrop", "timm", "torchvision", "numpy"):
        try:  # a module not imported (a program's ablation) is not imported for its version
            module = sys.modules.get(name)
            out[name] = (module.__version__ if module is not None
                         else importlib.metadata.version(name))
        except Exception:  # pragma: no cover - optional
            pass
    return out


def manifest(cfg: AblationConfig, program: Program, d: Dist, strategy: dict[str, Any],
             recorded: Sequence[tuple[str, int]] | None = None, *,
             hashed: bool = True, **extra: Any) -> dict[str, Any]:
    """``ablation.json`` as data: the resolved config, its hash (``hashed=False``: none, a
    search's fingerprint guards its folder), the variants, baseline and seeds, the strategy,
    every run the jobs may train (``recorded``; default: the config's), the versions, and what
    the program records (its data, or its command)."""
    pairs = cfg.runs() if recorded is None else list(recorded)
    return {"format": runs.FORMAT, "config": cfg.resolved(),
            "config_hash": cfg.hash() if hashed else None, **extra,
            "variants": cfg.variant_names, "baseline": cfg.baseline,
            "seeds": list(cfg.seed_list), "strategy": strategy,
            "runs": [{"id": runs.run_id(v, s), "variant": v, "seed": s} for v, s in pairs],
            "versions": versions(), **program.manifest(d)}


def record(folder: Path, cfg: AblationConfig, doc: dict[str, Any]) -> None:
    """Write ``ablation.json`` and the stored config of ``folder`` (a search's run folders, each
    round)."""
    runs.ensure_dir(folder, "the study's run folders")
    runs.atomic_write_json(folder / "ablation.json", doc, "the study's record")
    config.save_config(folder, cfg)


def claim_ablation(out: Path, cfg: AblationConfig, doc: dict[str, Any], resume: bool,
                   shard: tuple[int, int] | None, program: Program,
                   accept_data_change: bool) -> str | None:
    """Under the folder's lock: refuse ``out`` (the runs of another config, runs without
    ``--resume``, a search's folder, an older plugdrop's results, data files that changed since
    it started), else write ``ablation.json`` and the config the jobs read. Returns a warning
    to show (the data changed and ``accept_data_change`` lets it go on), or ``None``."""
    if (out / SEARCH_RECORD).exists():
        raise ConfigError(f"--out {out}: holds a plugdrop search; choose another --out for the "
                          f"ablation (continue the search with plugdrop search CONFIG --out "
                          f"{out} --resume)")
    with runs.claiming(out):
        if shard is not None:
            check_fresh(out, cfg, shard, resume)
        # a folder an older plugdrop started keeps its design (its config without spending)
        doc = dict(doc, config=config.as_recorded(out, doc["config"]))
        warning = runs.prepare(out, doc, resume or shard is not None, config.unhashed(),
                               program.files, accept_data_change, config.judging(),
                               cfg.judged_hash())
        config.save_config(out, cfg)
    return warning

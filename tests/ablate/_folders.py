"""Adaptive ablation folders written by hand (no training): ``ablation.json``, the stored
config and one finished run per value, as ``plugdrop ablate`` leaves them; ``legacy=True``: as
an older plugdrop left them (its recorded config has no ``spending``)."""

from __future__ import annotations

import json
from pathlib import Path

from plugdrop.ablate import config

#: a value per seed of each variant (val_acc), chosen so that the designs decide differently
BASE = [0.90, 0.91, 0.92, 0.905, 0.915]
OFFSETS = {"good": [0.05, 0.052, 0.049, 0.051, 0.05],
           "grid[p=0.1]": [0.02, 0.03, 0.01, 0.025, 0.02],
           "grid[p=0.2]": [-0.01, 0.0, -0.02, -0.005, -0.015],
           "noisy": [0.01, -0.012, 0.004, 0.02, -0.008]}
VALUES = {"baseline": dict(enumerate(BASE)),
          **{v: {s: BASE[s] + o[s] for s in range(5)} for v, o in OFFSETS.items()}}

CONFIG = """\
model: resnet10t
epochs: 1
seeds: {min: 3, max: 5}
EXTRA
variants:
  baseline: []
  good: [{layers: 'layer3.*', transform: DropBlock, p: 0.1}]
  grid: [{layers: 'layer3.*', transform: DropBlock, p: {grid: [0.1, 0.2]}}]
  noisy: [{layers: 'layer2.*', transform: DropBlock, p: 0.1}]
"""


def adaptive_folder(out: Path, values: dict[str, dict[int, float]] | None = None, *,
                    legacy: bool = False, extra: str = "") -> config.AblationConfig:
    """An adaptive ablation (seeds 3..5, variants ``good``, ``grid[p=0.1]``, ``grid[p=0.2]``,
    ``noisy``) whose finished runs have the final val_acc ``values`` (default
    :data:`VALUES`); ``extra``: more settings."""
    cfg = config.loads(CONFIG.replace("EXTRA\n", extra), "cfg.yaml")
    resolved = cfg.resolved()
    if legacy:
        resolved = {k: v for k, v in resolved.items() if k not in config.DESIGN_SETTINGS}
    out.mkdir(parents=True, exist_ok=True)
    (out / "ablation.json").write_text(json.dumps({
        "format": 1, "config": resolved, "config_hash": cfg.hash(),
        "variants": cfg.variant_names, "baseline": cfg.baseline, "seeds": list(cfg.seed_list),
        "runs": [{"id": f"{v}__s{s}", "variant": v, "seed": s} for v, s in cfg.runs()],
        "versions": {"plugdrop": "0.1.0"},
        "data": {"name": "digits", "train": 100, "val": 50, "classes": ["0", "1"]}}))
    config.save_config(out, cfg)
    for v, per in (VALUES if values is None else values).items():
        for s, acc in per.items():
            d = out / "runs" / f"{v}__s{s}"
            d.mkdir(parents=True)
            (d / "run.json").write_text(json.dumps({"id": d.name, "variant": v, "seed": s,
                                                    "config_hash": cfg.hash()}))
            (d / "metrics.jsonl").write_text(json.dumps(
                {"epoch": 1, "val_acc": acc, "val_loss": 1 - acc, "epoch_time": 1.0}) + "\n")
            (d / "done.json").write_text(json.dumps({"epochs": 1, "wall_time": 1.0}))
    return cfg

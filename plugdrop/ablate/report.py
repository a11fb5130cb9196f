"""TEMPORARY minimal report until the report helper's module is merged (spec API)."""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COLUMNS = ("variant", "seed", "epoch", "train_loss", "val_loss", "val_acc", "val_loss_ema",
           "val_acc_ema", "epoch_time", "images_per_s", "lr")


@dataclass
class Report:
    table: str
    files: list[Path] = field(default_factory=list)
    finished: int = 0
    failed: int = 0
    incomplete: int = 0


def write_report(out: Path, *, plots: bool = True) -> Report:
    man = json.loads((out / "ablation.json").read_text())
    rows: list[dict[str, Any]] = []
    counts = {"finished": 0, "failed": 0, "incomplete": 0}
    final: dict[str, list[float]] = {}
    for r in man["runs"]:
        p = out / "runs" / r["id"]
        status = "finished" if (p / "done.json").exists() else "failed" if (
            p / "failed.json").exists() else "incomplete"
        counts[status] += 1
        recs = []
        if (p / "metrics.jsonl").exists():
            for line in (p / "metrics.jsonl").read_text().splitlines():
                try:
                    recs.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        for rec in recs:
            rows.append({"variant": r["variant"], "seed": r["seed"], **rec})
        if status == "finished" and recs:
            final.setdefault(r["variant"], []).append(recs[-1]["val_acc"])
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for row in rows:
            w.writerow([row.get(c, "") for c in COLUMNS])
    (out / "results.json").write_text(json.dumps({"records": rows}, indent=1))
    lines = ["variant  seeds  final val acc"]
    for v in man["variants"]:
        if v in final:
            accs = final[v]
            sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
            lines.append(f"{v}  {len(accs)}  {100 * statistics.fmean(accs):.2f} ± {100 * sd:.2f}")
    return Report("\n".join(lines), [out / "results.csv", out / "results.json"], **counts)

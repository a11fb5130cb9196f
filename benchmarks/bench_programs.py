"""What a ``program:`` ablation costs plugdrop, beside the program's own training:

* a metrics file of many lines parsed in one call against line by line (the path a torn
  line still takes), interleaved, median of 5 rounds: the ratio;
* ``plugdrop report`` of a folder of 3 runs that logged ``--lines`` records each: seconds,
  and seconds per million records;
* the bootstrap of ``attach_to`` against the same script run plainly (a small torch model
  from a factory of its own, 5 optimizer steps), interleaved, median of 5: the ratio of wall
  times, start-up included.

    PYTHONPATH=. python benchmarks/bench_programs.py [--lines 400000] [--markdown FILE]

A benchmark, not a test: on a shared machine, read the figures as ratios and repeat them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from plugdrop.ablate.runs.records import parse_records

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

MANY = """\
import json, os, sys
n = int(sys.argv[1])
with open(os.environ["PLUGDROP_METRICS"], "a") as f:
    for i in range(n):
        f.write(json.dumps({"step": i, "loss": 1.0 / (i + 1), "score": 0.5 + i * 1e-7}) + "\\n")
"""
MODELS = """\
import torch.nn as nn


def build():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))
"""
TRAIN = """\
import torch, mymodels
model = mymodels.build()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    loss = model(torch.randn(8, 1, 12, 12)).square().mean()
    opt.zero_grad(); loss.backward(); opt.step()
"""


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def parse_ratio(lines: int) -> tuple[float, float, float]:
    text = [json.dumps({"step": i, "loss": 1 / (i + 1), "score": 0.5}) for i in range(lines)]
    torn = text + ['{"step": 1, "lo']  # a torn last line: read line by line
    one, each = [], []
    for _ in range(5):
        one.append(_timed(lambda: parse_records(text)))
        each.append(_timed(lambda: parse_records(torn)))
    a, b = statistics.median(one), statistics.median(each)
    return a, b, a / b


def report_seconds(home: Path, lines: int) -> float:
    (home / "many.py").write_text(MANY)
    (home / "cfg.yaml").write_text(
        f"program: [{PY}, many.py, '{lines}']\ndecide_on: {{metric: score, goal: max}}\n"
        f"margin: 0.01\nseeds: [0, 1, 2]\nplots: false\nvariants:\n  baseline: []\n")
    subprocess.run([PY, "-m", "plugdrop", "ablate", "cfg.yaml", "--out", "out"], cwd=home,
                   check=True, capture_output=True)
    return _timed(lambda: subprocess.run([PY, "-m", "plugdrop", "report", "out", "--no-plots"],
                                         cwd=home, check=True, capture_output=True))


def bootstrap_ratio(home: Path) -> tuple[float, float, float]:
    (home / "mymodels.py").write_text(MODELS)
    (home / "train.py").write_text(TRAIN)
    (home / "spec.yaml").write_text('[{"layers": "2", "transform": "Dropout2d", "p": 0.1}]')
    env = dict(os.environ, PLUGDROP_SEED="0", PLUGDROP_VARIANT="v", PLUGDROP_SPEC="spec.yaml",
               PLUGDROP_RUN_DIR=str(home), PLUGDROP_METRICS=str(home / "m.jsonl"),
               PLUGDROP_RESUME="0", PLUGDROP_ATTACH_TO="mymodels.build",
               PYTHONPATH=str(ROOT))
    plain, boot = [], []
    for _ in range(5):
        plain.append(_timed(lambda: subprocess.run([PY, "train.py"], cwd=home, env=env,
                                                   check=True)))
        boot.append(_timed(lambda: subprocess.run([PY, "-m", "plugdrop.bootstrap", "train.py"],
                                                  cwd=home, env=env, check=True)))
    a, b = statistics.median(boot), statistics.median(plain)
    return a, b, a / b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=400_000)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one, each, ratio = parse_ratio(args.lines)
        (Path(tmp) / "report").mkdir()
        report = report_seconds(Path(tmp) / "report", args.lines)
        boot, plain, bratio = bootstrap_ratio(Path(tmp))
    rows = [
        f"| parse {args.lines:,} lines: one call / line by line | {one:.2f} s / {each:.2f} s "
        f"| {ratio:.2f}x |",
        f"| `plugdrop report`, 3 runs x {args.lines:,} records | {report:.1f} s "
        f"({report / (3 * args.lines / 1e6):.1f} s per million records) | |",
        f"| the bootstrap / the plain script (torch start-up included) | {boot:.2f} s / "
        f"{plain:.2f} s | {bratio:.2f}x |"]
    text = "| what | seconds | ratio |\n| --- | --- | --- |\n" + "\n".join(rows) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text("# What a `program:` ablation costs plugdrop\n\n"
                                 "`PYTHONPATH=. python benchmarks/bench_programs.py` (one run, "
                                 "2-core machine):\n\n" + text)


if __name__ == "__main__":
    main()

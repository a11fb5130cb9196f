"""Shared helpers of the tests of ``program:``: the fake programs (``programs/fake.py``, stdlib
only, and ``programs/fake.sh``), configs around them, and reading what a run recorded."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from plugdrop.cli import main

PROGRAMS = Path(__file__).resolve().parent / "programs"
PY = sys.executable

#: baseline, a variant better on `score` (a Dropout's p adds to it), one worse (DropBlock's p
#: takes from it)
VARIANTS = """\
  baseline: []
  good:
    - {layers: "layer1.*", transform: Dropout, p: 0.1}
  bad:
    - {layers: "layer1.*", transform: DropBlock, p: 0.1, block_size: 3}
"""


def config(program: str, *, seeds: str = "[0]", variants: str = VARIANTS, extra: str = "",
           decide: str = "{metric: score, goal: max}\nmargin: 0.005", plots: bool = False) -> str:
    """An ablation config around ``program`` (YAML of the ``program:`` value); no plots
    unless a test looks at them (``plots``)."""
    return (f"program: {program}\ndecide_on: {decide}\nseeds: {seeds}\n{extra}"
            f"plots: {str(plots).lower()}\nvariants:\n{variants}")


def fake(*args: str) -> str:
    """``program:`` running the fake Python program with ``args`` (a YAML flow list)."""
    return "[" + ", ".join(json.dumps(a) for a in (PY, "fake.py", *args)) + "]"


def folder(tmp_path: Path, monkeypatch, text: str, name: str = "cfg.yaml") -> Path:
    """``tmp_path`` with the fake programs and the config ``text``, made the working
    directory (where ``plugdrop ablate`` starts, and so where the programs run)."""
    for f in PROGRAMS.iterdir():
        if f.is_file():
            shutil.copy2(f, tmp_path / f.name)
    (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    return tmp_path / name


def ablate(*args: str) -> int:
    """``plugdrop ablate cfg.yaml --out out ARGS`` in this process."""
    return main(["ablate", "cfg.yaml", "--out", "out", *args])


def run_dir(out: Path, run: str) -> Path:
    return out / "runs" / run


def starts(out: Path, run: str) -> list[dict]:
    """Every start of ``run``'s program as it recorded it (env, cwd, argv, resumed, from)."""
    path = run_dir(out, run) / "work" / "starts.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def failed(out: Path, run: str) -> dict:
    return json.loads((run_dir(out, run) / "failed.json").read_text())


def decisions(out: Path) -> list[tuple]:
    """The decisions taken, as (round, seeds, variant, verdict)."""
    path = out / "decisions.jsonl"
    return [(d["round"], d["seeds"], d["variant"], d["verdict"])
            for d in map(json.loads, path.read_text().splitlines()) if "round" in d]


def verdicts(out: Path) -> dict[str, str]:
    summary = json.loads((out / "results.json").read_text())["summary"]
    return {s["variant"]: s["verdict"] for s in summary}

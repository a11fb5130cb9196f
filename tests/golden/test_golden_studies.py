"""Golden numbers of whole studies: what the study loop decides must not move when the loop is
refactored. Three studies of a stdlib program (``noisy.py``, ``search_target.py``), each a few
seconds: an adaptive ablation (its decisions round by round, the runs it trained, its report's
statistics), a fixed one (Holm's verdicts), and a seeded search (its candidates, its best and
the confirmation). Stored in ``studies.json``; regenerated, in a commit of its own that says
why, with ``./dev test tests/golden --update-golden -p no:xdist``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from test_golden import REPORT_TIMING, _compare, _store

HERE = Path(__file__).resolve().parent
STUDIES = HERE / "studies.json"
SEARCH_TARGET = HERE.parent / "ablate" / "search" / "search_target.py"

pytestmark = pytest.mark.slow

PROGRAM = json.dumps([sys.executable, "noisy.py"])

ADAPTIVE = f"""\
program: {PROGRAM}
decide_on: {{metric: score, goal: max}}
margin: 0.01
seeds: {{min: 3, max: 8}}
plots: false
variants:
  baseline: []
  good: [{{layers: "layer1.*", transform: Dropout, p: 0.03}}]
  bad: [{{layers: "layer1.*", transform: DropBlock, p: 0.03, block_size: 3}}]
  same: [{{layers: "layer1.*", transform: GaussianNoise, std: 0.05}}]
  small: [{{layers: "layer1.*", transform: Dropout, p: 0.004}}]
  ramp: [{{layers: "layer2.*", transform: Dropout, p: {{grid: [0.002, 0.012, 0.025]}}}}]
"""

FIXED = f"""\
program: {PROGRAM}
decide_on: {{metric: score, goal: max}}
margin: 0.01
seeds: [0, 1, 2, 3, 4]
plots: false
variants:
  baseline: []
  good: [{{layers: "layer1.*", transform: Dropout, p: 0.03}}]
  bad: [{{layers: "layer1.*", transform: DropBlock, p: 0.03, block_size: 3}}]
  small: [{{layers: "layer1.*", transform: Dropout, p: 0.004}}]
"""

SEARCH = f"""\
program: {json.dumps([sys.executable, "search_target.py"])}
decide_on: {{metric: score, goal: max}}
margin: 0.005
seeds: {{min: 2, max: 4}}
plots: false
variants:
  baseline: []
search:
  budget: 40
  seed: 5
  parallel: 3
  space:
    - {{layers: {{choice: ["layer1.*", "layer2.*", "layer3.*", "layer4.*"]}}, transform: DropBlock,
       p: {{range: [0.01, 0.3]}}, block_size: {{choice: [3, 5]}}}}
"""


def _lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _runs(out: Path) -> dict[str, str]:
    """Each run of the folder's record with how it ended (finished, failed, not trained)."""
    doc = json.loads((out / "ablation.json").read_text())
    got = {}
    for r in doc["runs"]:
        folder = out / "runs" / r["id"]
        got[r["id"]] = ("finished" if (folder / "done.json").exists() else
                        "failed" if (folder / "failed.json").exists() else "not trained")
    return got


def _summary(out: Path) -> list[dict[str, Any]]:
    summary = json.loads((out / "results.json").read_text())["summary"]
    return [{k: v for k, v in row.items() if k not in REPORT_TIMING} for row in summary]


def _check(key: str, got: Any, update: bool) -> None:
    got = json.loads(json.dumps(got))
    want = _store(STUDIES, update, key, got, lambda p: json.loads(p.read_text()),
                  lambda p, d: p.write_text(json.dumps(d, indent=1, sort_keys=True) + "\n"))
    moved: list[str] = []
    _compare(key, got, want, moved)
    assert not moved, "\n".join(moved[:20])


def _ablate(tmp_path: Path, monkeypatch: Any, text: str) -> Path:
    from plugdrop.cli import main

    shutil.copy2(HERE / "noisy.py", tmp_path / "noisy.py")
    (tmp_path / "cfg.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert main(["ablate", "cfg.yaml", "--out", "out"]) == 0
    return tmp_path / "out"


def test_an_adaptive_ablations_decisions_are_golden(tmp_path, monkeypatch, update_golden):
    out = _ablate(tmp_path, monkeypatch, ADAPTIVE)
    _check("adaptive", {"decisions": _lines(out / "decisions.jsonl"), "runs": _runs(out),
                        "summary": _summary(out)}, update_golden)


def test_a_fixed_ablations_verdicts_are_golden(tmp_path, monkeypatch, update_golden):
    out = _ablate(tmp_path, monkeypatch, FIXED)
    _check("fixed", {"runs": _runs(out), "summary": _summary(out)}, update_golden)


def test_a_seeded_searchs_best_and_confirmation_are_golden(tmp_path, monkeypatch,
                                                           update_golden):
    pytest.importorskip("optuna", reason="plugdrop search needs Optuna: pip install "
                                         "'plugdrop[search]'")
    from plugdrop.cli import main

    shutil.copy2(SEARCH_TARGET, tmp_path / "search_target.py")
    (tmp_path / "search.yaml").write_text(SEARCH)
    monkeypatch.chdir(tmp_path)
    assert main(["search", "search.yaml", "--out", "out"]) in (0, 1)
    out = tmp_path / "out"
    doc = json.loads((out / "search.json").read_text())
    _check("search", {**{k: doc[k] for k in ("phase", "best", "confirmation", "candidates",
                                              "runs", "rounds", "search_seeds")},
                      "trials": _runs(out / "trials"),
                      "summary": _summary(out / "trials")
                      if (out / "trials" / "results.json").exists() else None},
           update_golden)

"""The examples of ``examples/programs/`` as ablations, each program run once on its own small
data (one variant, one seed, one or two epochs: what costs is starting a process that imports
torch, Lightning or transformers): a plain PyTorch loop with ``plugdrop.current_run``, a
Lightning script and a Hugging Face ``Trainer`` script that become programs by adding the
``Regularize`` callback, and segmentation of generated shapes decided on its own metric (the
mean IoU), whose report shows its metrics."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from plugdrop.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "programs"


@pytest.fixture
def at_root(monkeypatch):
    """The repository's root as the working directory (the examples name their scripts from
    there), this Python first on PATH (their ``python``), one thread per program."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent),
                                                os.environ.get("PATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def _ablate(example: str, variant: str, epochs: int, tmp_path: Path) -> tuple[dict, Path]:
    """The example's config, as written but for its one ``variant``, ``epochs`` epochs and
    the seed 0: its ablation's ``results.json`` and folder."""
    cfg = yaml.safe_load((EXAMPLES / example).read_text())
    argv = cfg["program"]
    argv[argv.index("--epochs") + 1] = str(epochs)
    cfg["variants"] = {variant: cfg["variants"][variant]}
    cfg["seeds"] = [0]
    path, out = tmp_path / example, tmp_path / "out"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["ablate", str(path), "--out", str(out)]) == 0
    return json.loads((out / "results.json").read_text()), out


def _records(out: Path, run: str) -> list[dict]:
    return [json.loads(x) for x in (out / "runs" / run / "metrics.jsonl").read_text()
            .splitlines()]


@pytest.mark.parametrize("example,variant,metrics", [
    ("plain_loop.yaml", "dropblock", {"val_acc", "val_loss", "train_loss"}),
    ("lightning_script.yaml", "dropblock", {"val_acc", "val_loss"}),
    ("hf_trainer.yaml", "droppath", {"eval_accuracy", "eval_loss"}),
], ids=["plain", "lightning", "hf"])
def test_a_training_script_is_an_ablation(at_root, tmp_path, example, variant, metrics):
    doc, out = _ablate(example, variant, 1, tmp_path)
    assert doc["counts"] == {"finished": 1, "failed": 0, "incomplete": 0}
    records = _records(out, f"{variant}__s0")
    assert metrics <= set(records[-1]) and ("epoch" in records[-1] or "step" in records[-1])
    spec = json.loads((out / "runs" / f"{variant}__s0" / "spec.yaml").read_text())
    assert spec == doc["config"]["variants"][variant] != []


def test_the_segmentation_example_decides_on_its_own_metric(at_root, tmp_path):
    doc, out = _ablate("segmentation.yaml", "dropblock-encoder", 2, tmp_path)
    assert doc["config"]["decide_on"] == {"metric": "val_miou", "goal": "max"}
    assert doc["counts"]["finished"] == 1
    logged = doc["logged"]["dropblock-encoder"]
    assert set(logged) == {"val_miou", "val_loss", "val_pixel_acc", "train_loss"}
    assert 0.0 < logged["val_miou"]["mean"] <= 1.0
    assert [r["epoch"] for r in _records(out, "dropblock-encoder__s0")] == [1, 2]
    page = (out / "report.html").read_text()
    assert "Final values of the logged metrics" in page and "val_pixel_acc" in page
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "val_miou" in (out / "results.csv").read_text().splitlines()[0]

"""``plugdrop search`` end to end: the stdlib program ``search_target.py`` through the runner's
launchers and run folders (a search SIGKILLed in the middle and resumed with ``--resume`` ends
with the same files as an uninterrupted one), and a search on the embedded digits with
plugdrop's own trainer whose report shows the importance, the history and the
confirmation."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _search_helpers import (  # noqa: F401, I001 (tests/ablate on the path; a fixture)
    HERE, TEXT, local_search, same)
from _runner_helpers import Driver, popen

from plugdrop.cli import main

pytest.importorskip("optuna")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
def _folder(tmp_path: Path, text: str) -> Path:
    shutil.copy2(HERE / "search_target.py", tmp_path / "search_target.py")
    (tmp_path / "search.yaml").write_text(text)
    return tmp_path


def _cli(cwd: Path, *args: str) -> subprocess.Popen | Driver:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT),
                                                       os.environ.get("PYTHONPATH", "")]))
    return popen("search", "search.yaml", "--out", "out", *args, cwd=cwd, env=env, merged=True)


def test_a_killed_search_resumed_ends_as_an_uninterrupted_one(tmp_path, local_search):
    """SIGKILL to ``plugdrop search`` (its process group) once a third of the runs finished,
    then ``--resume``: the same search as the uninterrupted one (``local_search``)."""
    cut = _folder(tmp_path, TEXT)
    p = _cli(cut)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # kill it once a third of the runs finished
        done = list((cut / "out" / "trials" / "runs").glob("*/done.json"))
        if len(done) >= 4 or p.poll() is not None:
            break
        time.sleep(0.05)
    assert p.poll() is None, "the search ended before it could be killed"
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert not (cut / "out" / "best.yaml").exists()
    resumed = _cli(cut, "--resume")
    log, _ = resumed.communicate(timeout=400)
    assert resumed.returncode in (0, 1), log
    assert "confirmed on" in log
    assert same(cut / "out") == same(local_search)
    assert (cut / "out" / "best.yaml").read_text() == (local_search / "best.yaml").read_text()
    journal = (cut / "out" / "study.journal").read_text().splitlines()
    assert all(json.loads(line) for line in journal)  # data, never a pickle
    html = (local_search / "report.html").read_text()
    for part in ("What mattered", "History", "Confirmation on fresh seeds"):
        assert part in html


DIGITS = """\
model: tinynet:make
data: digits
image_size: 8
epochs: 1
batch_size: 128
device: cpu
gradcam: false
seeds: {min: 2, max: 2}
decide_on: val_nll
variants:
  baseline: []
search:
  budget: 12
  space:
    - {layers: {choice: ["layer1.*", "layer2.*"]}, transform: Dropout2d,
       p: {range: [0.05, 0.3]}}
"""


def test_a_digits_search_with_plugdrops_trainer(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT / "tests"))  # tinynet
    (tmp_path / "search.yaml").write_text(DIGITS)
    code = main(["search", "search.yaml", "--out", "out"])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    doc = json.loads((tmp_path / "out" / "search.json").read_text())
    assert doc["runs"] <= 12 and doc["confirmation"]["complete"]
    assert doc["confirmation"]["seeds"] == [2, 3]
    assert len(doc["candidates"]) >= 3
    assert doc["importance"]["evaluator"] and set(doc["importance"]["values"]) == {"layers", "p"}
    p = doc["best"]["attachments"][0]["p"]
    assert p == float(f"{p:.4g}")  # what trained: 4 significant digits
    assert doc["best"]["attachments"][0]["transform"] == "Dropout2d"
    assert isinstance(doc["best"]["attachments"][0]["p"], float)
    assert (tmp_path / "out" / "best.yaml").read_text().count("Dropout2d") == 1
    html = (tmp_path / "out" / "report.html").read_text()
    assert html.count("data:image/png") >= 4  # importance, values, history, confirmation
    assert "sampler TPE, seed 0" in html
    assert "History" in html and "Confirmation on fresh seeds" in html
    assert "What mattered" in html
    assert (tmp_path / "out" / "trials" / "ablation.json").exists()
    assert main(["search", "search.yaml", "--out", "out"]) == 2  # not without --resume
    assert "holds this search already; add --resume" in capsys.readouterr().err
    assert main(["search", "search.yaml", "--out", "out", "--resume"]) in (0, 1)
    assert json.loads((tmp_path / "out" / "search.json").read_text())["best"] == doc["best"]

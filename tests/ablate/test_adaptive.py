"""Adaptive ablations end to end (``seeds: {min, max}``) on the embedded digits with a tiny
CNN: a clearly harmful variant stops early as worse while the others go on; the
decisions and their reasons are lines of ``decisions.jsonl`` and fields of ``results.json``; a
killed and resumed ablation makes the same decisions with the same seeds; every launcher
(processes, submitit, Ray) drives it round by round; ``--shard`` is refused; the new metrics
are recorded."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from _runner_helpers import (  # noqa: F401 (ray_cluster, reference: fixtures)
    popen, ray_cluster, reference, write)

from plugdrop.cli import main

ADAPTIVE = """\
model: tinynet:make
data: digits
image_size: 8
epochs: 2
batch_size: 128
seeds: {min: 3, max: 5}
device: cpu
gradcam: false
plots: false
variants:
  baseline: []
  noise:
    - {layers: layer1, transform: GaussianNoise, std: 5.0}
  dropblock:
    - {layers: "layer1.*", transform: DropBlock, p: 0.1, block_size: 3}
"""


def decisions(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "decisions.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def ref(reference) -> Path:
    """An uninterrupted adaptive ablation (one thread, as the subprocesses run), trained once
    for the test session (both test processes run this module's tests)."""
    return reference(ADAPTIVE)


@pytest.mark.slow
def test_a_harmful_variant_stops_early_as_worse(ref, capsys):
    """The noise variant falls to chance accuracy (about -50 pp), but this tiny net's baseline
    itself varies by several pp between seeds: at 3 seeds its t-statistic (about -10, 2
    degrees of freedom) stays inside the first round's boundary of the default spending (a
    fifth of its alpha there: |t| > 13.7), and it is called worse at the second round, with
    4 seeds, while dropblock goes on (the old design stopped it at 3)."""
    dec = {d["variant"]: d for d in decisions(ref)}
    noise = dec["noise"]
    assert (noise["verdict"], noise["round"], noise["seeds"], noise["n"]) == ("worse", 2, 4, 4)
    assert noise["high"] < 0 and noise["p_adjusted"] < 0.05 and "below 0" in noise["reason"]
    assert not (ref / "runs" / "noise__s4").exists()  # no fifth seed for a decided variant
    doc = json.loads((ref / "results.json").read_text())
    summ = {s["variant"]: s for s in doc["summary"]}
    assert summ["noise"]["verdict"] == "worse" and summ["noise"]["seeds_used"] == 4
    assert summ["noise"]["decision"]["high"] == pytest.approx(noise["high"])
    assert summ["noise"]["p_adjusted"] == pytest.approx(noise["p_adjusted"])
    assert summ["baseline"]["seeds_used"] == summ["dropblock"]["seeds_used"] > 4
    assert summ["noise"]["iqm"]["n"] == 4 and summ["noise"]["probability_of_improvement"]
    assert doc["counts"]["incomplete"] == 0  # the runs the design never needed are none
    table = (ref / "report.html").read_text()
    assert "runs saved" in table and "noise" in table


@pytest.mark.slow
def test_metrics_regularization_is_judged_on_are_recorded(ref):
    rec = json.loads((ref / "runs" / "baseline__s0" / "metrics.jsonl").read_text()
                     .splitlines()[-1])
    assert {"val_nll", "val_top5", "val_ece", "train_acc", "gap", "calibration"} <= set(rec)
    assert 0 <= rec["val_ece"] <= 1 and rec["val_top5"] >= rec["val_acc"]
    assert rec["gap"] == pytest.approx(rec["train_acc"] - rec["val_acc"])
    cal = rec["calibration"]
    assert sum(cal["count"]) == 359 and len(cal["count"]) == 15
    import csv

    row = next(csv.DictReader((ref / "results.csv").open()))
    assert {"val_nll", "val_ece", "gap"} <= set(row)


@pytest.mark.slow
def test_a_resumed_adaptive_ablation_decides_the_same(tmp_path, ref):
    """Killed (SIGKILL) in its second round and resumed: the same decisions, the same seeds."""
    out = tmp_path / "out"
    path = write(tmp_path, ADAPTIVE)
    proc = popen("ablate", str(path), "--out", str(out))
    marker = out / "runs" / "baseline__s3" / "checkpoint.pt"  # round 2 has begun
    t0 = time.monotonic()
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        assert time.monotonic() - t0 < 240
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    again = popen("ablate", str(path), "--out", str(out), "--resume")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-2000:]
    assert decisions(out) == decisions(ref)
    used = sorted(p.name for p in (out / "runs").iterdir())
    assert used == sorted(p.name for p in (ref / "runs").iterdir())


@pytest.mark.slow
def test_an_old_folder_resumes_with_the_design_it_started_with(tmp_path, ref):
    """A folder of an older plugdrop (its recorded config has no ``spending``), resumed: it
    keeps its design (ablation.json still without it, the same config hash), the decisions
    are the legacy design's on its values, and its lines say so."""
    import shutil

    from plugdrop.ablate.results import decision_values, load_ablation
    from plugdrop.ablate.decide import legacy as L
    from plugdrop.ablate.decide import design_of

    out = tmp_path / "old"
    shutil.copytree(ref, out, ignore=shutil.ignore_patterns(".lock", "*.lock"))
    manifest = json.loads((out / "ablation.json").read_text())
    manifest["config"] = {k: v for k, v in manifest["config"].items()
                          if k not in ("spending", "passing")}
    (out / "ablation.json").write_text(json.dumps(manifest))
    assert main(["ablate", str(write(tmp_path, ADAPTIVE)), "--out", str(out), "--resume"]) == 0
    after = json.loads((out / "ablation.json").read_text())
    assert "spending" not in after["config"] and after["config_hash"] == manifest["config_hash"]
    ab = load_ablation(out)
    design = design_of(ab.config, legacy=True)
    assert design is not None
    want = design.replay(decision_values(ab, "val_acc")).events
    got = decisions(out)
    assert got == json.loads(json.dumps(want)) and got
    assert all(d["procedure"] == L.PROCEDURE for d in got)
    assert "procedure: legacy" in (out / "report.html").read_text()
    assert {d["variant"]: d["verdict"] for d in decisions(ref)}["noise"] == "worse"
    assert all(d["procedure"].startswith("exact group-sequential") for d in decisions(ref))


# Fewer runs for the launchers: the baseline and one variant, two rounds (2 seeds, then a 3rd
# for the undecided one): 6 runs, each a job of its own.
LAUNCHED = ADAPTIVE.replace("seeds: {min: 3, max: 5}", "seeds: {min: 2, max: 3}").replace(
    "  noise:\n    - {layers: layer1, transform: GaussianNoise, std: 5.0}\n", "")


@pytest.fixture(scope="module")
def ref_launched(reference) -> Path:
    out = reference(LAUNCHED)  # once for the session: the Ray test runs in another process
    assert max(d["round"] for d in decisions(out)) == 2  # the launchers drive two rounds
    return out


@pytest.mark.slow
@pytest.mark.parametrize("launcher", [
    "processes", "submitit",
    # the process of the cluster tests (tests/conftest.py's _GROUPS)
    pytest.param("ray", marks=pytest.mark.xdist_group("clusters"))])
def test_an_adaptive_ablation_through_each_launcher(launcher, tmp_path, ref_launched, request,
                                                    capsys):
    """Every launcher trains a round's runs as its jobs; the driver decides between rounds:
    the same decisions and the same run folders as the local runner. (processes: the design
    comes from --seeds-min/--seeds-max over a config with a list of seeds.)"""
    out = tmp_path / "out"
    if launcher == "ray":
        request.getfixturevalue("ray_cluster")
        assert main(["ablate", str(write(tmp_path, LAUNCHED)), "--out", str(out),
                     "--launcher", "ray", "--cpus-per-run", "1"]) == 0
        printed = capsys.readouterr().out
    else:
        if launcher == "processes":
            text = LAUNCHED.replace("seeds: {min: 2, max: 3}", "seeds: [0, 1]")
            extra = ["--seeds-min", "2", "--seeds-max", "3"]
        else:
            pytest.importorskip("submitit", reason="the submitit extra is not installed")
            text, extra = LAUNCHED, ["--slurm-cluster", "local"]
        proc = popen("ablate", str(write(tmp_path, text)), "--out", str(out), "--launcher",
                     launcher, "--max-parallel", "2", *extra)
        printed, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    assert "round 1: 2 of at most 3 seeds" in printed and f"through {launcher}" in printed
    assert "round 2: 3 of at most 3 seeds" in printed
    assert decisions(out) == decisions(ref_launched)
    used = sorted(p.name for p in (out / "runs").iterdir())
    assert used == sorted(p.name for p in (ref_launched / "runs").iterdir())


def test_shards_are_refused_for_an_adaptive_design(tmp_path, capsys):
    assert main(["ablate", str(write(tmp_path, ADAPTIVE)), "--out", str(tmp_path / "s"),
                 "--shard", "1/2"]) == 2
    err = capsys.readouterr().err
    assert "--shard 1/2: shards split a fixed list of seeds" in err and err.count("\n") == 1


@pytest.mark.parametrize("value,message", [
    ("{min: 3}", "seeds max must be an integer >= 2"),
    ("{min: 4, max: 3}", "seeds max (3) is less than min (4)"),
    ("{min: 3, max: 6, steps: 2}", "seeds has no setting 'steps' (did you mean 'step'?)"),
    ("3", "seeds: 3 is one seed, the seed 3, not 3 seeds: write seeds: [3] for that seed, "
          "seeds: [0, 1, 2] for 3 seeds, or {min: 3, max: 8}"),
])
def test_seed_plan_mistakes_are_one_line(tmp_path, capsys, value, message):
    assert main(["ablate", str(write(tmp_path, ADAPTIVE)), "--list", "--set",
                 f"seeds={value}"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_decide_on_needs_what_the_runs_record(tmp_path, capsys):
    text = ADAPTIVE.replace("gradcam: false", "gradcam: false\ndecide_on: val_acc_ema")
    assert main(["ablate", str(write(tmp_path, text)), "--out", str(tmp_path / "o")]) == 2
    assert "decide_on: val_acc_ema needs an EMA model" in capsys.readouterr().err


def _chromium() -> str | None:
    import shutil

    return next((p for name in ("chromium", "chromium-browser", "google-chrome")
                 if (p := shutil.which(name))), None)


@pytest.mark.slow
def test_report_html_opens_in_a_real_browser(ref, tmp_path):
    """report.html in headless Chromium: it loads without a console error, every image it
    holds decodes (plots and Grad-CAM are inline), and every variant is on the page. (The
    reference ablation has ``plots: false``: ``plugdrop report`` draws them into a copy.)"""
    import re
    import shutil
    import subprocess

    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium here (apt-get install chromium) to open report.html in")
    shutil.copytree(ref, tmp_path / "out")
    assert main(["report", str(tmp_path / "out")]) == 0
    page = tmp_path / "out" / "report.html"
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # nothing from the network
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
         "--v=0", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    dom = proc.stdout
    shown = re.search(r'data-images-shown="(\d+)"', dom)
    assert shown is not None and int(shown.group(1)) == text.count("<img ") >= 5
    for variant in ("baseline", "noise", "dropblock"):
        assert f"<td>{variant}</td>" in dom
    assert "worse" in dom and "runs saved" in dom

"""Any script as it is (issue: a model class the script defines, every variant checked before
training, restarts that start over, runs that do not trample each other): ``attach_to`` naming a
class wherever it is defined, the dry start of each variant before any run trains, a restarted
run's records from its last start only, ``workdir``, the receipt naming the model's class (also
of ``pd.attach_all`` of ``PLUGDROP_SPEC``), and ``plugdrop layers script.py:Net``. The script is
``programs/net_script.py``: it defines ``Net`` itself and prints its metrics."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
import torch.nn as nn

import plugdrop as pd
from plugdrop import _receipt
from plugdrop.ablate import config
from plugdrop.ablate.errors import ConfigError
from plugdrop.ablate.launch import LaunchOptions, make_launcher
from plugdrop.ablate.programs import sources
from plugdrop.ablate.study import check_command
from plugdrop.cli import main

from _programs import PROGRAMS, PY, ablate, failed, folder, run_dir
from _programs import config as make_config
from _runner_helpers import cli, env, popen

#: the script's printed line, as metrics_from reads it
PRINTED = (r"'Test set: Average loss: (?P<test_loss>[0-9.]+), Accuracy: \d+/\d+ "
           r"\((?P<acc>[0-9.]+)%\)'")
DROP = "  baseline: []\n  drop: [{layers: conv2, transform: Dropout2d, p: 0.1}]\n"


def _script_config(attach_to: str = "Net", variants: str = DROP, extra: str = "",
                   args: tuple[str, ...] = ()) -> str:
    program = json.dumps([PY, "net_script.py", "--seed", "{seed}", *args])
    return make_config(program, variants=variants, decide="{metric: acc, goal: max}\nmargin: 1",
                       extra=f"attach_to: {attach_to}\nmetrics_from: {{stdout: {PRINTED}}}\n"
                             f"{extra}")


# --------------------------------------------------------------------------- the settings


@pytest.mark.parametrize("written,names", [
    ("Net", ("Net",)), ("__main__.Net", ("__main__.Net",)), ("net_script.py:Net", ("net_script.Net",)),
    ("[Net, timm]", ("Net", "timm.create_model")), ("{factory: Net, steps: 20}", ("Net",)),
])
def test_attach_to_names_a_class(written, names):
    cfg = config.loads(_script_config(attach_to=written), "cfg.yaml")
    assert cfg.attach_to.factories == names


def test_a_shard_dry_starts_only_its_own_variants():
    """``--shard I/N`` trains some variants only: the dry starts (a fresh interpreter each) are
    of theirs; a spec two variants share is started once."""
    from plugdrop.ablate.launch.shard import select
    from plugdrop.ablate.programs import dry

    three = DROP + "  same: [{layers: conv2, transform: Dropout2d, p: 0.1}]\n" \
        "  other: [{layers: conv1, transform: Dropout2d, p: 0.2}]\n"
    cfg = config.loads(_script_config(variants=three), "cfg.yaml")
    assert [v.name for v in dry._distinct(cfg)] == ["baseline", "drop", "other"]
    mine = {v for v, _ in select(cfg.runs(), 3, 4)}  # one seed: the third variant's run
    assert mine == {"same"}
    assert [v.name for v in dry._distinct(cfg, mine)] == ["same"]
    assert dry._distinct(cfg, set()) == []


def test_runs_at_once_in_one_working_directory_are_refused_unless_told():
    text = _script_config()
    processes = make_launcher("processes", LaunchOptions(max_parallel=2))
    try:
        with pytest.raises(ConfigError, match=r"--launcher processes runs several runs at once, "
                                              r"and every run's program runs in .* \(workdir: "
                                              r"start\).*set workdir: run .* or workdir: shared"):
            check_command(config.loads(text, "cfg.yaml"), processes, LaunchOptions(
                max_parallel=2), 1)
        for told in ("shared", "run"):
            cfg = config.loads(text + f"workdir: {told}\n", "cfg.yaml")
            check_command(cfg, processes, LaunchOptions(max_parallel=2), 1)
        one = config.loads(text, "cfg.yaml")
        check_command(one, processes, LaunchOptions(max_parallel=1), 1)
    finally:
        processes.close()
    with pytest.raises(ConfigError, match="workdir is the folder a training program"):
        config.loads("model: resnet18\ndata: digits\nworkdir: run\nvariants:\n  baseline: []\n",
                     "cfg.yaml")


# --------------------------------------------------------------------------- restarts


def test_printed_records_start_with_the_attempt_that_started_over(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "attempt-1.stdout").write_text("acc 1\nacc 2\nacc 3\n")  # stopped after 3 epochs
    (logs / "attempt-2.stdout").write_text("acc 4\nacc 5\n")  # started over: 2 so far
    spec = config.MetricsFrom("stdout", r"acc (?P<acc>\d+)")
    assert len(sources.Source(spec, None, logs).read()[0]) == 5  # every attempt's
    recs, _ = sources.Source(spec, None, logs, first=2).read()
    assert recs == [{"step": 1, "acc": 4}, {"step": 2, "acc": 5}]


# --------------------------------------------------------------------------- receipts


@pytest.fixture
def receipt_of_a_run(tmp_path, monkeypatch):
    """The run contract's environment of a run whose receipt is ``tmp_path/attached.json``;
    what this process tracks is forgotten afterwards."""
    spec = tmp_path / "spec.yaml"
    spec.write_text('[{"layers": "0", "transform": "Dropout", "p": 0.1}]\n')
    for k, v in {"PLUGDROP_SEED": "0", "PLUGDROP_VARIANT": "drop", "PLUGDROP_SPEC": str(spec),
                 "PLUGDROP_RUN_DIR": str(tmp_path), "PLUGDROP_RESUME": "0",
                 "PLUGDROP_METRICS": str(tmp_path / "metrics.jsonl"),
                 "PLUGDROP_RECEIPT": str(tmp_path / "attached.json")}.items():
        monkeypatch.setenv(k, v)
    yield spec, tmp_path / "attached.json"
    _receipt._TRACKED.clear()


def test_attach_all_of_the_runs_spec_leaves_the_receipt(receipt_of_a_run):
    """The run contract's table: a program may hand PLUGDROP_SPEC to pd.attach_all itself."""
    spec, receipt = receipt_of_a_run
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    pd.attach_all(model, "[{layers: '1', transform: Dropout, p: 0.2}]")  # not the run's spec
    assert not receipt.exists()
    group = pd.attach_all(model, os.environ["PLUGDROP_SPEC"], steps=10)
    model(__import__("torch").randn(2, 4))
    _receipt.write()
    doc = json.loads(receipt.read_text())
    assert doc["by"] == "attach_all" and doc["variant"] == "drop"
    assert doc["models"] == ["torch.nn.modules.container.Sequential"]
    assert doc["attachments"] == [{"label": "Dropout@0", "layers": ["0"], "calls": 1}]
    group.remove()


def test_the_receipt_names_the_class_run_attach_attached_to(receipt_of_a_run):
    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.add_module("0", nn.Linear(4, 4))

    run = pd.current_run()
    run.attach(Tiny(), steps=10).remove()
    doc = json.loads(receipt_of_a_run[1].read_text())
    assert doc["by"] == "run.attach" and doc["models"] == [f"{__name__}.{Tiny.__qualname__}"]


# --------------------------------------------------------------------------- plugdrop layers


def test_layers_finds_a_class_in_the_working_directorys_files(tmp_path, monkeypatch, capsys):
    (tmp_path / "net_script.py").write_text((PROGRAMS / "net_script.py").read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        for name in ("net_script.py:Net", "net_script:Net"):
            assert main(["layers", name, "--input-size", "1", "8", "8"]) == 0
            shown = capsys.readouterr().out
            assert "conv1" in shown and "conv2" in shown and "fc" in shown
    finally:
        sys.modules.pop("net_script", None)
    assert main(["layers", "nets.py:Net"]) == 2
    assert "cannot import Net from nets.py" in capsys.readouterr().err


# --------------------------------------------------------------------------- the bootstrap


def _bootstrap(tmp_path: Path, attach_to: str, spec: str, *args: str, script: str = "net_script.py",
               cwd: Path | None = None, **extra: str):
    """``python -m plugdrop.bootstrap SCRIPT ARGS`` as a run's program, forked warm; returns
    the process's result and its receipt (``None`` when it left none)."""
    (tmp_path / "spec.yaml").write_text(spec)
    receipt = tmp_path / "attached.json"
    receipt.unlink(missing_ok=True)
    e = dict(env(), PLUGDROP_SEED="0", PLUGDROP_VARIANT="v", PLUGDROP_RESUME="0",
             PLUGDROP_SPEC=str(tmp_path / "spec.yaml"), PLUGDROP_RUN_DIR=str(tmp_path),
             PLUGDROP_METRICS=str(tmp_path / "m.jsonl"), PLUGDROP_RECEIPT=str(receipt),
             PLUGDROP_ATTACH_TO=attach_to, **extra)
    got = cli(script, *args, env=e, cwd=cwd or tmp_path, module="plugdrop.bootstrap")
    return got, (json.loads(receipt.read_text()) if receipt.exists() else None)


CONV2 = '[{"layers": "conv2", "transform": "Dropout2d", "p": 0.1}]'
RAMP = ('[{"layers": "conv2", "transform": "Dropout2d", "p": {"schedule": "linear", '
        '"start": 0.0, "end": 0.2, "steps": 50}}]')


@pytest.mark.slow
def test_the_bootstrap_attaches_to_the_class_a_script_defines(tmp_path):
    (tmp_path / "net_script.py").write_text((PROGRAMS / "net_script.py").read_text())
    for name in ("Net", "__main__.Net", "net_script.Net"):
        got, receipt = _bootstrap(tmp_path, name, CONV2, "--epochs", "1")
        assert got.returncode == 0, got.stderr
        assert receipt["models"] == ["__main__.Net"], name
        assert receipt["attachments"] == [{"label": "Dropout2d@conv2", "layers": ["conv2"],
                                           "calls": 10}]
        assert receipt["steps"] == 10 and receipt["by"] == f"attach_to {name}"
    # misspelt: the run fails at its first optimizer step, naming the script's classes
    got, receipt = _bootstrap(tmp_path, "Nett", CONV2)
    assert got.returncode == 1 and "Test set" not in got.stdout
    assert ("attach_to: Nett matched no model built before the first optimizer step (no "
            "instance of a class of that name); did you mean Net?") in got.stderr
    assert receipt["error"].startswith("attach_to: Nett matched no model")
    # a dry start stops at the first step, its receipt written, before any epoch ends
    got, receipt = _bootstrap(tmp_path, "Net", CONV2, PLUGDROP_DRY_START="1")
    assert got.returncode == 0 and "Test set" not in got.stdout
    assert receipt["attachments"][0]["calls"] == 1 and receipt["steps"] == 0


UPDATES_ITSELF = """\
import torch, mymodels
model = mymodels.build()
for _ in range(3):
    loss = model(torch.randn(4, 1, 6, 6)).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
            p.grad = None
"""
MODELS = """\
import torch.nn as nn


def build():
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(64, 2))


def not_a_model():
    return {"net": build()}
"""


@pytest.mark.slow
def test_the_bootstrap_says_what_it_could_not_do(tmp_path):
    """A factory module beside the script found from another working directory; a factory that
    returns no module; schedules that no torch.optim optimizer steps."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "mymodels.py").write_text(MODELS)
    (src / "loop.py").write_text(UPDATES_ITSELF)
    ramp = RAMP.replace("conv2", "0")
    got, receipt = _bootstrap(tmp_path, "mymodels.build", ramp, script="src/loop.py")
    assert got.returncode == 0, got.stderr  # mymodels imported from the script's folder
    assert receipt["attachments"][0]["calls"] == 3 and receipt["steps"] == 0
    assert "has schedules, but no torch.optim optimizer over the parameters" in receipt["error"]
    (src / "loop.py").write_text(UPDATES_ITSELF.replace("mymodels.build()",
                                                        "mymodels.not_a_model()['net']"))
    got, receipt = _bootstrap(tmp_path, "mymodels.not_a_model", ramp, script="src/loop.py")
    assert receipt["error"] == ("attach_to: mymodels.not_a_model was called but returned a "
                                "dict, not a torch.nn.Module: name the class of the model, or "
                                "the factory that returns it")


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_a_script_that_defines_its_model_is_ablated_unedited(tmp_path, monkeypatch, capsys):
    """attach_to: Net and metrics_from: {stdout: ...}: each variant dry-started first, each run
    in its own working directory (workdir: run: the script's relative data and its saved model
    there), each receipt naming the class, the regularized one's layers running."""
    folder(tmp_path, monkeypatch, _script_config(extra="workdir: run\n",
                                                 args=("--epochs", "2", "--save-model")))
    assert ablate() == 0
    out = tmp_path / "out"
    shown = capsys.readouterr().out
    assert ("dry start: variant 'drop' attaches Dropout2d@conv2 on 1 layer (conv2) to "
            "__main__.Net") in shown
    assert "dry start: variant 'baseline' attaches nothing (the baseline) to __main__.Net" in shown
    drop = json.loads((run_dir(out, "drop__s0") / "attached.json").read_text())
    assert drop["models"] == ["__main__.Net"] and drop["by"] == "attach_to Net"
    ((label, layers, calls),) = [(a["label"], a["layers"], a["calls"])
                                 for a in drop["attachments"]]
    assert label == "Dropout2d@conv2" and layers == ["conv2"] and calls == 20
    base = json.loads((run_dir(out, "baseline__s0") / "attached.json").read_text())
    assert base["models"] == ["__main__.Net"] and base["attachments"] == []
    for run in ("baseline__s0", "drop__s0"):
        work = run_dir(out, run) / "work"
        assert (work / "net_cnn.pt").is_file() and (work / "data" / "shapes.pt").is_file()
        recs = [json.loads(x) for x in (run_dir(out, run) / "metrics.jsonl").read_text()
                .splitlines()]
        assert [r["step"] for r in recs] == [1, 2] and 0 <= recs[-1]["acc"] <= 100
    assert not (tmp_path / "net_cnn.pt").exists()


@pytest.mark.slow
def test_what_every_run_would_meet_is_refused_before_any_run(tmp_path, monkeypatch, capsys):
    """A selector that matches nothing and a misspelt class: refused by the dry starts, one line
    per cause with the closest names, before any run trains."""
    variants = (DROP + "  typo: [{layers: conv3, transform: Dropout2d, p: 0.1}]\n"
                "  typo2: [{layers: conv3, transform: Dropout2d, p: 0.2}]\n")
    folder(tmp_path, monkeypatch, _script_config(variants=variants))
    assert ablate() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert not (tmp_path / "out" / "runs").exists()
    assert len(err) == 2, err  # one line each, the two typos' causes told apart by their place
    for line, (at, name) in zip(err, (("cfg.yaml:11", "typo"), ("cfg.yaml:12", "typo2"))):
        assert re.match(rf"plugdrop ablate: {at}:\d+ \(variant '{name}', dry start before any "
                        rf"run\): SelectorError: selector 'conv3' matched no module of Net. "
                        rf"Closest names: 'conv2'", line), line
        assert line.count("cfg.yaml") == 1, line
    # a misspelt class: one line for every variant
    (tmp_path / "cfg.yaml").write_text(_script_config(attach_to="Nett"))
    assert ablate() == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert ("cfg.yaml:5:1 (variants 'baseline', 'drop', dry start before any run): attach_to: "
            "Nett matched no model built before the first optimizer step") in line
    assert "did you mean Net?" in line
    assert not (tmp_path / "out" / "runs").exists()
    # a program that cannot start
    (tmp_path / "net_script.py").write_text("import torchh\n")
    assert ablate() == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert ("cfg.yaml:1:1 (variants 'baseline', 'drop', dry start before any run): program: it "
            "cannot start: it exited with status 1: ModuleNotFoundError: No module named "
            "'torchh'") in line


@pytest.mark.slow
def test_a_run_stopped_and_resumed_without_checkpoints_starts_clean(tmp_path):
    """Ctrl-C during a run of a script that keeps no checkpoint, then --resume: the run starts
    over, and holds the records of its last start only. (Without attach_to: what is tested
    is the driver's, and each dry start would be one more fresh interpreter per invocation.)"""
    program = json.dumps([PY, "net_script.py", "--seed", "{seed}", "--epochs", "3", "--sleep",
                          "1"])
    text = make_config(program, variants="  baseline: []\n",
                       decide="{metric: acc, goal: max}\nmargin: 1",
                       extra=f"metrics_from: {{stdout: {PRINTED}}}\n")
    assert "attach_to" not in text
    (tmp_path / "cfg.yaml").write_text(text)
    (tmp_path / "net_script.py").write_text((PROGRAMS / "net_script.py").read_text())
    proc = popen("ablate", "cfg.yaml", "--out", "out", cwd=tmp_path)
    printed = run_dir(tmp_path / "out", "baseline__s0") / "logs" / "attempt-1.stdout"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and "Test set" not in (
            printed.read_text() if printed.exists() else ""):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT
    assert "Test set" in printed.read_text()
    again = cli("ablate", "cfg.yaml", "--out", "out", "--resume", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    rd = run_dir(tmp_path / "out", "baseline__s0")
    attempts = [json.loads(x) for x in (rd / "attempts.jsonl").read_text().splitlines()]
    assert [a["resume"] for a in attempts] == [False, False]  # started over: no resume_args
    last = (rd / "logs" / "attempt-2.stdout").read_text().count("Test set")
    recs = [json.loads(x) for x in (rd / "metrics.jsonl").read_text().splitlines()]
    assert last == 3 and [r["step"] for r in recs] == [1, 2, 3]
    assert (rd / "work.before-2").is_dir()  # the first start's folder, set aside


APPLIES_THE_SPEC = """\
import json, os
import torch
import torch.nn as nn
import plugdrop as pd

# the run contract's table, followed by hand: the spec handed to attach_all, metrics appended
torch.manual_seed(int(os.environ["PLUGDROP_SEED"]))
model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1),
                      nn.Flatten(), nn.Linear(64, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
pd.attach_all(model, os.environ["PLUGDROP_SPEC"], steps=5).bind(opt)
for step in range(1, 6):
    loss = model(torch.randn(8, 1, 4, 4)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
with open(os.environ["PLUGDROP_METRICS"], "a") as f:
    f.write(json.dumps({"step": 5, "score": 0.5 + float(loss)}) + "\\n")
"""


@pytest.mark.slow
def test_a_program_that_hands_its_spec_to_attach_all_leaves_its_receipt(tmp_path, monkeypatch):
    """The guide's contract table: a program may apply PLUGDROP_SPEC with pd.attach_all; its
    runs finish without receipt: false. (The regularized variant alone: a baseline's run, one
    more fresh interpreter, attaches nothing and needs no receipt.)"""
    variants = "  drop: [{layers: '2', transform: Dropout2d, p: 0.1}]\n"
    folder(tmp_path, monkeypatch, make_config(json.dumps([PY, "applies.py"]), variants=variants))
    (tmp_path / "applies.py").write_text(APPLIES_THE_SPEC)
    for k, v in env().items():  # the program imports this worktree's plugdrop
        monkeypatch.setenv(k, v)
    assert ablate() == 0
    receipt = json.loads((run_dir(tmp_path / "out", "drop__s0") / "attached.json").read_text())
    assert receipt["by"] == "attach_all" and receipt["steps"] == 5
    assert receipt["models"] == ["torch.nn.modules.container.Sequential"]
    assert receipt["attachments"] == [{"label": "Dropout2d@2", "layers": ["2"], "calls": 5}]


def test_a_fixed_design_stops_once_its_first_runs_fail_alike(tmp_path, monkeypatch, capsys):
    """A failure every run meets costs one run per parallel slot (two at least), not the fixed
    design's first round (every run)."""
    broken = ("import sys\nprint('Traceback (most recent call last):', file=sys.stderr)\n"
              "print(\"ModuleNotFoundError: No module named 'torchh'\", file=sys.stderr)\n"
              "sys.exit(1)\n")
    variants = "  baseline: []\n  a: [{layers: x, transform: Dropout, p: 0.1}]\n"
    folder(tmp_path, monkeypatch, make_config(json.dumps([PY, "broken.py"]), seeds="[0, 1, 2]",
                                              variants=variants))
    (tmp_path / "broken.py").write_text(broken)
    assert ablate() == 2
    err = capsys.readouterr().err
    assert "the first 2 runs failed the same way before any finished" in err
    assert len(list((tmp_path / "out" / "runs").iterdir())) == 2  # of 6


PRINTS = """\
import os, sys
# prints its metric each epoch, keeps no checkpoint; its first start crashes after 2 epochs
for epoch in range(1, 4):
    print(f"acc {50 + epoch}", flush=True)
    if epoch == 2 and not os.path.exists("crashed"):
        open("crashed", "w").close()
        sys.exit(7)
"""


def test_a_run_that_starts_over_after_a_failure_holds_its_last_starts_records(tmp_path,
                                                                            monkeypatch):
    folder(tmp_path, monkeypatch, make_config(
        json.dumps([PY, "prints.py"]), variants="  baseline: []\n",
        decide="{metric: acc, goal: max}\nmargin: 1",
        extra="metrics_from: {stdout: 'acc (?P<acc>[0-9]+)'}\n"))
    (tmp_path / "prints.py").write_text(PRINTS)
    assert ablate() == 1
    assert "exited with status 7" in failed(tmp_path / "out", "baseline__s0")["error"]
    assert ablate("--resume") == 0
    rd = run_dir(tmp_path / "out", "baseline__s0")
    recs = [json.loads(x) for x in (rd / "metrics.jsonl").read_text().splitlines()]
    assert recs == [{"step": 1, "acc": 51}, {"step": 2, "acc": 52}, {"step": 3, "acc": 53}]
    attempts = [json.loads(x) for x in (rd / "attempts.jsonl").read_text().splitlines()]
    assert [a["resume"] for a in attempts] == [False, False]
    assert (rd / "work.before-2").is_dir() and (rd / "logs" / "attempt-1.stdout").exists()

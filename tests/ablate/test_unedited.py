"""A training script ablated as it is (issue: the unedited script): its metrics read from where
it writes them (``metrics_from``), resumed by arguments (``resume_args``), its model found by
the bootstrap (``attach_to``), a receipt from every variant, ``python`` as plugdrop's own
interpreter, a failure's line that keeps its exception, judging apart from training (a wrong
``decide_on`` costs one run, the corrected one keeps it), and stopping on what one run shows."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from plugdrop.ablate import config
from plugdrop.ablate.errors import ConfigError
from plugdrop.ablate.programs import dry, sources
from plugdrop.ablate.runs.records import merge_records
from plugdrop.cli import main

from _programs import PY, ablate, failed, folder, run_dir
from _programs import config as make_config

# --------------------------------------------------------------------------- the sources


def test_a_timm_summary_csv_is_read_by_epoch():
    text = ("epoch,train_loss,eval_loss,eval_top1,eval_top5,lr\n"
            "0,2.30,2.10,10.5,50.0,0.05\n1,1.90,1.70,31.0,80.0,0.04\n")
    recs = sources.csv_records(text)
    assert recs == [{"epoch": 0, "train_loss": 2.3, "eval_loss": 2.1, "eval_top1": 10.5,
                     "eval_top5": 50.0, "lr": 0.05},
                    {"epoch": 1, "train_loss": 1.9, "eval_loss": 1.7, "eval_top1": 31.0,
                     "eval_top5": 80.0, "lr": 0.04}]


def test_a_lightning_csv_with_empty_cells_keeps_only_numbers():
    text = ("epoch,step,train_loss,val_acc\n0,9,0.9,\n0,9,,0.61\n1,19,0.7,\n1,19,,0.72\n")
    spec = config.MetricsFrom("csv", "x.csv")
    src = sources.Source(spec, None, Path("."))
    merged = merge_records(sources.csv_records(text))
    assert merged == [{"epoch": 0, "step": 9, "train_loss": 0.9, "val_acc": 0.61},
                      {"epoch": 1, "step": 19, "train_loss": 0.7, "val_acc": 0.72}]
    assert str(src).startswith("metrics_from csv")


def test_a_trainer_state_json_log_history_is_read_by_step():
    doc = {"best_metric": None, "log_history": [
        {"epoch": 0.5, "step": 10, "loss": 1.2},
        {"epoch": 1.0, "step": 20, "eval_accuracy": 0.8, "eval_loss": 0.6}]}
    recs = sources.json_records(json.dumps(doc))
    # a fractional epoch is no position: the step says where
    assert recs == [{"step": 10, "loss": 1.2},
                    {"epoch": 1, "step": 20, "eval_accuracy": 0.8, "eval_loss": 0.6}]
    lines = '{"step": 1, "acc": 0.5}\nnot json\n{"step": 2, "acc": 0.6}\n'
    assert sources.json_records(lines) == [{"step": 1, "acc": 0.5}, {"step": 2, "acc": 0.6}]


def test_printed_lines_are_matched_by_named_groups():
    pattern = re.compile(r"epoch (?P<epoch>\d+): val_acc (?P<val_acc>[0-9.]+)")
    lines = ["loading", "epoch 1: val_acc 0.51", "noise", "epoch 2: val_acc 0.63"]
    assert sources.stdout_records(lines, pattern) == [{"epoch": 1, "val_acc": 0.51},
                                                      {"epoch": 2, "val_acc": 0.63}]
    # no position group: the n-th match is step n
    only = re.compile(r"acc=(?P<acc>[0-9.]+)")
    assert sources.stdout_records(["acc=0.1", "acc=0.2"], only) == [
        {"step": 1, "acc": 0.1}, {"step": 2, "acc": 0.2}]


def test_tensorboard_scalars_are_read_by_step(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "tb" / "version_0"))
    for step in (10, 20):
        w.add_scalar("val/acc", step / 100, step)
        w.add_scalar("train/loss", 1 / step, step)
    w.close()
    src = sources.Source(config.MetricsFrom("tensorboard", "tb"), tmp_path / "tb", tmp_path)
    recs, problem = src.read()
    assert problem is None
    assert [(r["step"], round(r["val/acc"], 6)) for r in recs] == [(10, 0.1), (20, 0.2)]


def test_a_missing_source_is_a_problem_not_an_error(tmp_path):
    src = sources.Source(config.MetricsFrom("csv", "s.csv"), tmp_path / "s.csv", tmp_path)
    recs, problem = src.read()
    assert recs == [] and "does not exist" in str(problem)


# --------------------------------------------------------------------------- the checks


@pytest.mark.parametrize("extra,message", [
    ("attach_to: timm\n", "attach_to runs a Python program under plugdrop's bootstrap"),
    ("attach_to: 'not a name!'\n", "is not a class name or a dotted name"),
    ("attach_to: tim\n", "(did you mean 'timm'"),
    ("workdir: runs\n", "did you mean"),
    ("attach_to: {factory: timm, step: 3}\n", "attach_to has no setting 'step'"),
    ("metrics_from: {xml: a.xml}\n", "metrics_from has no kind 'xml'"),
    ("metrics_from: {stdout: 'acc [0-9.]+'}\n", "names no metric"),
    ("metrics_from: {stdout: '(?P<acc>'}\n", "is not a regular expression"),
    ("metrics_from: {csv: '{rundir}/s.csv'}\n", "names {rundir} (did you mean"),
    ("resume_args: [--resume, '{run_dir}/x', '{oops}']\n", "names {oops}"),
    ("resume_args: {args: [--resume], when: x}\n", "resume_args has no setting 'when'"),
])
def test_mistakes_in_the_new_settings_are_one_line(extra, message):
    text = make_config("[./train.sh]", extra=extra)
    with pytest.raises(ConfigError, match=re.escape(message)):
        config.loads(text, "cfg.yaml")


def test_attach_to_needs_schedules_with_a_length():
    text = ("program: [python, train.py]\nattach_to: timm.create_model\n"
            "decide_on: {metric: a, goal: max}\nmargin: 0.1\nvariants:\n  baseline: []\n"
            "  ramp: [{layers: x, transform: Dropout, p: {schedule: linear, start: 0, "
            "end: 0.1}}]\n")
    with pytest.raises(ConfigError, match=r"cfg.yaml:7:\d+: .*give it steps:.*attach_to: "
                                          r"\{factory: timm.create_model, steps: N\}"):
        config.loads(text, "cfg.yaml")
    ok = text.replace("attach_to: timm.create_model", "attach_to: {factory: timm, steps: 50}")
    assert config.loads(ok, "cfg.yaml").attach_to.steps == 50


def test_the_settings_that_judge_are_not_in_the_runs_hash():
    text = make_config("[./train.sh]")
    base = config.loads(text, "cfg.yaml")
    for item in ("decide_on={metric: loss, goal: min}", "margin=0.5", "alpha=0.01",
                 "passing=bonferroni", "metrics_from={csv: s.csv}"):
        other = config.loads(text, "cfg.yaml", config.parse_overrides([item]))
        assert other.hash() == base.hash(), item
        assert other.judged_hash() != base.judged_hash() or item.startswith("metrics"), item
    trains = config.loads(text, "cfg.yaml", config.parse_overrides(["seeds=[0, 1]"]))
    assert trains.hash() != base.hash()


# --------------------------------------------------------------------------- the runs

SUMMARY = """\
import csv, os, sys
# a timm-like program: summary.csv in its output folder, --resume from its checkpoint
args = sys.argv[1:]
out = args[args.index("--output") + 1]
os.makedirs(out, exist_ok=True)
start = 0
if "--resume" in args:
    start = int(open(args[args.index("--resume") + 1]).read()) + 1
seed = int(os.environ["PLUGDROP_SEED"])
spec = open(os.environ["PLUGDROP_SPEC"]).read()
bonus = 2.0 if "Dropout" in spec else 0.0
with open(os.path.join(out, "argv.txt"), "a") as f:
    f.write(" ".join(args) + "\\n")
for epoch in range(start, 3):
    new = not os.path.exists(os.path.join(out, "summary.csv"))
    with open(os.path.join(out, "summary.csv"), "a") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["epoch", "train_loss", "eval_top1"])
        w.writerow([epoch, 1.0 / (epoch + 1), 50 + bonus + epoch + (seed % 3) * 0.1])
    open(os.path.join(out, "last.txt"), "w").write(str(epoch))
    if epoch == 0 and os.environ.get("PLUGDROP_RESUME") == "0" and \\
            os.path.exists("crash-once") and not os.path.exists("crashed"):
        open("crashed", "w").close()
        sys.exit(7)
if spec.strip() != "[]":
    with open(os.environ["PLUGDROP_RECEIPT"], "w") as f:
        f.write('{"by": "summary.py", "attachments": [{"label": "x", "layers": ["a"], '
                '"calls": 3}]}')
"""

ONE_GOOD = "  baseline: []\n  good: [{layers: x, transform: Dropout, p: 0.1}]\n"


def _summary_config(decide="{metric: eval_top1, goal: max}", extra="", seeds="[0, 1, 2]"):
    program = json.dumps([PY, "summary.py", "--output", "{run_dir}/train"])
    return make_config(program, seeds=seeds, variants=ONE_GOOD, decide=decide + "\nmargin: 0.5",
                       extra="metrics_from: {csv: '{run_dir}/train/summary.csv'}\n"
                             "resume_args: {args: [--resume, '{run_dir}/train/last.txt'], "
                             "if_exists: '{run_dir}/train/last.txt'}\n" + extra)


def test_metrics_from_a_csv_and_resume_args_finish_an_interrupted_run(tmp_path, monkeypatch,
                                                                     capsys):
    folder(tmp_path, monkeypatch, _summary_config(seeds="[0]"))
    (tmp_path / "summary.py").write_text(SUMMARY)
    (tmp_path / "crash-once").touch()
    assert ablate() == 1  # the first run crashed once (exit 7)
    assert "exited with status 7" in failed(tmp_path / "out", "baseline__s0")["error"]
    assert ablate("--resume") == 0
    work = run_dir(tmp_path / "out", "baseline__s0") / "work" / "train"
    argv = (work / "argv.txt").read_text().splitlines()
    assert "--resume" not in argv[0] and argv[1].endswith(f"--resume {work / 'last.txt'}")
    # the records of both attempts, copied into the run's metrics file
    recs = [json.loads(x) for x in (run_dir(tmp_path / "out", "baseline__s0")
                                    / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in recs] == [0, 1, 2] and recs[-1]["eval_top1"] == 52.0
    done = json.loads((run_dir(tmp_path / "out", "good__s0") / "done.json").read_text())
    assert done["value"] == 54.0 and done["decide_on"] == "eval_top1"


def test_a_wrong_decide_on_costs_one_run_and_the_corrected_one_keeps_it(tmp_path, monkeypatch,
                                                                       capsys):
    folder(tmp_path, monkeypatch, _summary_config(decide="{metric: eval_acc1, goal: max}"))
    (tmp_path / "summary.py").write_text(SUMMARY)
    assert ablate() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len([x for x in err if x.startswith("plugdrop ablate:")]) == 1, err
    line = err[-1]
    assert ("run baseline__s0, the first to complete, exited with status 0 but logged no "
            "value of eval_acc1 (decide_on); it logged train_loss, eval_top1") in line
    assert "plugdrop ablate cfg.yaml --out out --resume" in line
    out = tmp_path / "out"
    assert [p.name for p in (out / "runs").iterdir() if (p / "failed.json").exists()] == [
        "baseline__s0"]
    assert sum((p / "done.json").exists() for p in (out / "runs").iterdir()) == 0
    # corrected: the first run is judged again (not trained again), the others train
    text = (tmp_path / "cfg.yaml").read_text().replace("eval_acc1", "eval_top1")
    (tmp_path / "cfg.yaml").write_text(text)
    assert ablate("--resume") == 0
    argv = (run_dir(out, "baseline__s0") / "work" / "train" / "argv.txt").read_text()
    assert len(argv.splitlines()) == 1  # trained once
    assert all((run_dir(out, f"{v}__s{s}") / "done.json").exists()
               for v in ("baseline", "good") for s in range(3))
    (change,) = json.loads((out / "ablation.json").read_text())["judging_changes"]
    assert change["changed"]["decide_on"] == {"from": {"metric": "eval_acc1", "goal": "max"},
                                              "to": {"metric": "eval_top1", "goal": "max"}}
    first = json.loads((out / "decisions.jsonl").read_text().splitlines()[0])
    assert first["judging_changed"]["runs_ended"] == 1
    assert "the judging changed after 1 run had ended" in (out / "report.html").read_text()
    # the report judges on another metric without training
    assert main(["report", "out", "--no-plots", "--decide-on", "train_loss", "--goal", "min",
                 "--set", "margin=0.01"]) == 0
    shown = capsys.readouterr().out
    assert "final train_loss" in shown and "decide_on" in shown and "this report" in shown


def test_a_variant_not_attached_fails_and_stops_the_ablation(tmp_path, monkeypatch, capsys):
    script = SUMMARY.replace('if spec.strip() != "[]":', "if False:")
    folder(tmp_path, monkeypatch, _summary_config())
    (tmp_path / "summary.py").write_text(script)
    assert ablate() == 2
    err = capsys.readouterr().err
    assert "run good__s0: the program finished without attaching variant 'good' (no receipt" \
        in err and "receipt: false" in err
    assert failed(tmp_path / "out", "good__s0")["reason"] == "receipt"
    assert not (run_dir(tmp_path / "out", "good__s1")).exists()
    # a program that applies the spec by other means says so
    text = (tmp_path / "cfg.yaml").read_text() + "receipt: false\n"
    (tmp_path / "cfg.yaml").write_text(text)
    assert ablate("--resume") == 0


def test_a_receipt_whose_hooks_never_ran_fails_the_run(tmp_path, monkeypatch, capsys):
    script = SUMMARY.replace('"calls": 3', '"calls": 0')
    folder(tmp_path, monkeypatch, _summary_config(seeds="[0]"))
    (tmp_path / "summary.py").write_text(script)
    assert ablate() == 2
    assert "was attached (x on 1 layers) but its hooks never ran in training" in \
        failed(tmp_path / "out", "good__s0")["error"]


def test_the_same_failure_in_the_first_runs_stops(tmp_path, monkeypatch, capsys):
    script = ("import sys\nprint('Traceback (most recent call last):', file=sys.stderr)\n"
              "print('  File \"train.py\", line 1, in <module>', file=sys.stderr)\n"
              "print(\"ModuleNotFoundError: No module named 'torchh'\", file=sys.stderr)\n"
              "sys.exit(1)\n")
    folder(tmp_path, monkeypatch, make_config(json.dumps(["python", "broken.py"]),
                                              seeds="{min: 2, max: 6}", variants=ONE_GOOD))
    (tmp_path / "broken.py").write_text(script)
    assert ablate() == 2
    err = capsys.readouterr().err
    # two runs (one per parallel slot, two at least), not the first round's four
    assert re.search(r"the first 2 runs failed the same way before any finished \(\S+, \S+\), "
                     r"so no further run is started: the program exited with status 1: "
                     r"ModuleNotFoundError: No module named 'torchh'", err), err
    assert len(list((tmp_path / "out" / "runs").iterdir())) == 2


def test_python_is_the_interpreter_that_runs_plugdrop(tmp_path, monkeypatch, capsys):
    script = ("import os, sys, json\nopen(os.path.join(os.environ['PLUGDROP_RUN_DIR'], "
              "'python.txt'), 'w').write(sys.executable)\n"
              "open(os.environ['PLUGDROP_METRICS'], 'a').write(json.dumps({'step': 1, "
              "'score': 0.5}) + '\\n')\n")
    folder(tmp_path, monkeypatch, make_config("[python, which.py]", variants="  baseline: []\n"))
    (tmp_path / "which.py").write_text(script)
    monkeypatch.setenv("PATH", "/nonexistent")  # no python on PATH at all
    assert ablate() == 0
    assert (run_dir(tmp_path / "out", "baseline__s0") / "work" / "python.txt").read_text() == \
        sys.executable
    assert f"python is {sys.executable}" in capsys.readouterr().out


MODELS = """\
import torch.nn as nn


def build(width=4):
    return nn.Sequential(nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(width, width, 3, padding=1), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(width, 2))
"""

TRAIN = """\
import json, os, sys
import torch
import mymodels

opt_first = "--opt-first" in sys.argv
torch.manual_seed(int(os.environ.get("PLUGDROP_SEED", "0")))
if opt_first:  # the optimizer built before the model's own is known: over a stand-in
    holder = torch.nn.Linear(1, 1)
model = mymodels.build()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 6):
    x = torch.randn(8, 1, 6, 6)
    loss = model(x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
with open(os.environ["PLUGDROP_METRICS"], "a") as f:
    f.write(json.dumps({"step": 5, "score": 0.5}) + "\\n")
"""


@pytest.mark.slow
def test_the_timm_style_example_runs_unedited(tmp_path, monkeypatch):
    pytest.importorskip("timm")
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    # without its dry start (a fresh interpreter importing timm before the run's own): the
    # run's receipt below says what the dry start would have (the dry starts are tested in
    # test_scripts.py)
    monkeypatch.setattr(dry, "dry_start", lambda *args, **kwargs: [])
    out = tmp_path / "out"
    # one seed, and of the three runs the third shard's one (the suite's time: a run of the
    # script is 10 s or more, most of it importing timm): DropPath on every residual branch,
    # found by tracing the model the bootstrap was handed
    assert main(["ablate", "examples/programs/timm_style.yaml", "--out", str(out), "--set",
                 "seeds=[0]", "--set", "plots=false", "--shard", "3/3"]) == 0
    receipt = json.loads((out / "runs" / "droppath-residual__s0" / "attached.json").read_text())
    assert receipt["by"] == "attach_to timm.create_model" and receipt["steps"] == 21
    (drop,) = receipt["attachments"]
    assert len(drop["layers"]) == 4 and drop["calls"] == 4 * 21  # each branch, each step
    assert not (out / "runs" / "dropblock-l2__s0").exists()
    assert not (out / "runs" / "baseline__s0").exists()
    done = json.loads((out / "runs" / "droppath-residual__s0" / "done.json").read_text())
    assert done["decide_on"] == "eval_top1" and 0 < done["value"] <= 100


def test_a_folder_of_an_earlier_version_resumes_with_its_runs(tmp_path, monkeypatch, capsys):
    """Versions before 0.2 hashed the judging settings in (away from their defaults): their
    folders and runs record that hash, which a resumed ablation recognizes and keeps."""
    folder(tmp_path, monkeypatch, _summary_config(seeds="[0]"))
    (tmp_path / "summary.py").write_text(SUMMARY)
    assert ablate() == 0
    out = tmp_path / "out"
    cfg = config.load_stored(out)
    old = cfg.judged_hash()
    assert old != cfg.hash()
    for path in [out / "ablation.json", *(out / "runs").glob("*/run.json")]:
        doc = json.loads(path.read_text())
        doc["config_hash"] = old  # as the earlier version wrote them
        path.write_text(json.dumps(doc))
    stored = json.loads((out / config.CONFIG_FILE).read_text())
    (out / config.CONFIG_FILE).write_text(json.dumps(dict(stored, config_hash=old)))
    capsys.readouterr()
    assert main(["report", "out", "--no-plots"]) == 0  # read as it is, before any resume
    assert "2 runs finished" in capsys.readouterr().out
    assert ablate("--resume") == 0
    manifest = json.loads((out / "ablation.json").read_text())
    assert manifest["config_hash"] == cfg.hash() and manifest["earlier_hashes"] == [old]
    argv = (run_dir(out, "good__s0") / "work" / "train" / "argv.txt").read_text()
    assert len(argv.splitlines()) == 1  # not trained again
    assert json.loads((out / "results.json").read_text())["summary"][1]["finished"] == 1


def test_the_report_judges_a_trainers_folder_under_another_alpha(tmp_path, capsys):
    """``plugdrop report --set alpha=...`` on a folder of plugdrop's trainer: the verdicts of
    the stored runs under the other setting, the change said; a setting that trains otherwise
    is refused in one line."""
    from _folders import adaptive_folder

    out = tmp_path / "ab"
    adaptive_folder(out)
    capsys.readouterr()
    assert main(["report", str(out), "--no-plots", "--set", "alpha=0.2"]) == 0
    shown = capsys.readouterr().out
    assert "alpha 0.05 -> 0.2" in shown and "this report" in shown
    assert main(["report", str(out), "--no-plots", "--set", "epochs=3"]) == 2
    err = capsys.readouterr().err
    assert "epochs changes the runs themselves" in err and err.count("\n") == 1


@pytest.mark.slow
def test_the_bootstrap_attaches_to_a_factory_of_the_users_own(tmp_path, monkeypatch, capsys):
    """``attach_to: mymodels.build`` (a factory of the user's own, beside the script): each
    receipt names the factory, the layers, the steps of the optimizer over the model and its
    class, and the report shows what each variant attached. The program is ``[python, -m,
    MODULE]``, run under the bootstrap as ``python -m`` would; one variant's program never
    calls the factory: its receipt says so, and its run fails with that line. (One ablation
    for both: each run and each dry start is a fresh interpreter.)"""
    (tmp_path / "mymodels.py").write_text(MODELS)
    variants = ("  baseline: []\n  drop: [{layers: '2', transform: Dropout2d, p: 0.2}]\n"
                "  other: [{layers: '2', transform: Dropout2d, p: 0.2}]\n")
    folder(tmp_path, monkeypatch, make_config("[python, -m, trainmod]", variants=variants,
                                              extra="attach_to: mymodels.build\n"))
    (tmp_path / "trainmod.py").write_text(TRAIN.replace(
        "model = mymodels.build()",
        "model = (mymodels.build() if os.environ['PLUGDROP_VARIANT'] != 'other' else\n"
        "         torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(36, 2)))"))
    assert ablate() == 1  # a selector's mistake is refused before any run: test_scripts.py
    out = tmp_path / "out"
    receipt = json.loads((run_dir(out, "drop__s0") / "attached.json").read_text())
    assert receipt["by"] == "attach_to mymodels.build"
    assert receipt["attachments"] == [{"label": "Dropout2d@2", "layers": ["2"], "calls": 5}]
    assert receipt["steps"] == 5  # bound to the optimizer over the model
    assert receipt["models"] == ["torch.nn.modules.container.Sequential"]
    page = (out / "report.html").read_text()
    assert "What each variant attached" in page and "Dropout2d@2 (1 layer)" in page
    error = failed(out, "other__s0")["error"]  # ended at its first optimizer step
    assert error.startswith("the program exited with status 1; its stderr ends: plugdrop "
                            "bootstrap: attach_to: mymodels.build was never called before the "
                            "first optimizer step"), error


def test_a_program_fixed_instead_of_the_config_trains_its_run_again(tmp_path, monkeypatch,
                                                                    capsys):
    """The judging unchanged, a run that completed without the metric is trained again on
    ``--resume``: the program was what had to change (it logs the metric now)."""
    folder(tmp_path, monkeypatch, _summary_config(seeds="[0]"))
    (tmp_path / "summary.py").write_text(SUMMARY.replace('"eval_top1"]', '"eval_acc"]'))
    assert ablate() == 2
    assert "logged no value of eval_top1" in capsys.readouterr().err
    (tmp_path / "summary.py").write_text(SUMMARY)  # fixed: it logs eval_top1
    assert ablate("--resume") == 0
    rd = run_dir(tmp_path / "out", "baseline__s0")
    # trained again from the start (no --resume), the first attempt's folder kept beside
    (argv,) = (rd / "work" / "train" / "argv.txt").read_text().splitlines()
    assert "--resume" not in argv
    assert (rd / "work.before-2" / "train" / "summary.csv").exists()

"""Ablations of a training program of the user's (``program:``): the run contract (arguments,
environment, the spec file, the working directory, the program's own folder), decisions on the
program's own metric through the adaptive design, every way a program fails (one line each,
the other runs finishing), signals passed on, SIGKILL of the driver and of a program with
``--resume``, and what the config refuses. The programs are ``programs/fake.py`` (the standard
library only, a few "epochs" in well under a second) and ``programs/fake.sh`` (a shell
script)."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml
from _programs import (PY, ablate, config, decisions, failed, fake, folder, run_dir, starts,
                       verdicts)

import plugdrop as pd
from plugdrop.ablate import config as C
from plugdrop.ablate.errors import ConfigError
from plugdrop.ablate.programs import process

BASE_GOOD = """\
  baseline: []
  good:
    - {layers: "layer1.*", transform: Dropout, p: 0.1}
"""
ADAPTIVE = "{min: 3, max: 5}"


# ----------------------------------------------------------------------------- the contract


@pytest.mark.slow
def test_a_program_is_handed_the_run_contract(tmp_path, monkeypatch, capsys):
    for name in [k for k in os.environ if k.startswith("PLUGDROP_")]:  # the developer's own
        monkeypatch.delenv(name)  # (PLUGDROP_TEST_WORKERS=3 ./dev test): not the contract's
    folder(tmp_path, monkeypatch, config(fake(
        "--seed", "{seed}", "--echo", "{variant}", "{spec}", "{run_dir}", "{metrics}")))
    assert ablate() == 0
    out = tmp_path / "out"
    for v in ("baseline", "good", "bad"):
        rd = run_dir(out, f"{v}__s0").absolute()
        (start,) = starts(out, f"{v}__s0")
        assert start["cwd"] == str(tmp_path) and start["resumed"] is False
        assert start["env"] == {
            "PLUGDROP_SEED": "0", "PLUGDROP_VARIANT": v, "PLUGDROP_SPEC": str(rd / "spec.yaml"),
            "PLUGDROP_RUN_DIR": str(rd / "work"), "PLUGDROP_METRICS": str(rd / "metrics.jsonl"),
            "PLUGDROP_RESUME": "0", "PLUGDROP_RUN_ID": f"{v}__s0",
            "PLUGDROP_RECEIPT": str(rd / "attached.json")}
        assert start["argv"] == ["--seed", "0", "--echo", v, str(rd / "spec.yaml"),
                                 str(rd / "work"), str(rd / "metrics.jsonl")]
        assert "epoch 3" in (rd / "logs" / "attempt-1.stdout").read_text()
        (attempt,) = [json.loads(x) for x in (rd / "attempts.jsonl").read_text().splitlines()]
        assert attempt["resume"] is False and attempt["launcher"] == "local"
        assert json.loads((rd / "done.json").read_text())["decide_on"] == "score"
    # the spec file: exactly the variant's attachments (the baseline's is empty), read alike
    # as JSON (the program above), as YAML and by plugdrop.parse_spec
    spec = run_dir(out, "good__s0") / "spec.yaml"
    want = [{"layers": "layer1.*", "transform": "Dropout", "p": 0.1}]
    assert json.loads((run_dir(out, "good__s0") / "work" / "spec.copy").read_text()) == want
    assert yaml.safe_load(spec.read_text()) == want
    assert [a.describe() for a in pd.parse_spec(spec)] == want
    assert json.loads((run_dir(out, "baseline__s0") / "work" / "spec.copy").read_text()) == []
    assert (run_dir(out, "baseline__s0") / "spec.yaml").read_text().strip() == "[]"
    bad = json.loads((run_dir(out, "bad__s0") / "spec.yaml").read_text())
    assert bad == [{"layers": "layer1.*", "transform": "DropBlock", "p": 0.1, "block_size": 3}]
    printed = capsys.readouterr().out
    assert "plugdrop ablate: program " in printed and "[good seed=0] epoch 3:" in printed


def test_a_spec_file_is_yaml_and_json_for_any_value(tmp_path, monkeypatch):
    from plugdrop.ablate.programs import contract

    text = config(fake(), variants="""\
  sched:
    - {layers: ["a", "b.*"], transform: DropBlock, block_size: 3,
       p: {schedule: linear, start: 0.0, end: 1e-5, steps: 100}}
""")
    cfg = C.loads(text)
    written = contract.spec_text(cfg.variant("sched")).decode()
    assert "1.0e-05" in written  # a float a YAML 1.1 reader reads as a float too
    assert json.loads(written) == yaml.safe_load(written) == [
        {"layers": ["a", "b.*"], "transform": "DropBlock", "block_size": 3,
         "p": {"schedule": "linear", "start": 0.0, "end": 1e-5, "steps": 100}}]


@pytest.mark.slow
def test_a_shell_script_is_a_program(tmp_path, monkeypatch, capsys):
    folder(tmp_path, monkeypatch, config("./fake.sh", seeds=ADAPTIVE, variants=BASE_GOOD))
    assert ablate() == 0
    out = tmp_path / "out"
    assert verdicts(out) == {"baseline": "baseline", "good": "better"}
    copied = json.loads((run_dir(out, "good__s2") / "work" / "spec.copy").read_text())
    assert copied == [{"layers": "layer1.*", "transform": "Dropout", "p": 0.1}]
    records = [json.loads(x) for x in
               (run_dir(out, "good__s2") / "metrics.jsonl").read_text().splitlines()]
    assert records[-1] == {"epoch": 3, "score": 0.723, "resume": 0}
    assert "done: seed 2 variant good" in (run_dir(out, "good__s2") / "logs" /
                                           "attempt-1.stdout").read_text()


# ------------------------------------------------------------------ decisions and the report


@pytest.mark.slow
def test_decisions_on_the_programs_metric_and_its_report(tmp_path, monkeypatch, capsys):
    folder(tmp_path, monkeypatch, config(fake(), seeds=ADAPTIVE, plots=True))
    assert ablate() == 0
    out = tmp_path / "out"
    assert verdicts(out) == {"baseline": "baseline", "good": "better", "bad": "worse"}
    assert [(r, v, d) for r, _, v, d in decisions(out)] == [(1, "good", "better"),
                                                             (1, "bad", "worse")]
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["decide_on"] == {"metric": "score", "goal": "max"}
    assert "epochs" not in doc["config"] and "model" not in doc["config"]
    assert set(doc["logged"]["good"]) == {"score", "loss"}
    assert doc["logged"]["good"]["score"]["n"] == 3
    assert doc["runs"][0]["metrics"][-1] == {"epoch": 3, "loss": 0.53, "score": 0.47}
    header = (out / "results.csv").read_text().splitlines()[0]
    assert header == "variant,seed,epoch,step,score,loss"
    assert (out / "curves.png").is_file() and (out / "forest.png").is_file()
    for name in ("val_acc.png", "final_acc.png", "calibration.png", "drop_frac.png"):
        assert not (out / name).exists(), name
    page = (out / "report.html").read_text()
    assert "Learning curves" in page and "Final values of the logged metrics" in page
    assert "calibration (calibration.png): it needs the confidence bins" in page
    assert "program " in page and "Grad-CAM</h2>" not in page
    table = capsys.readouterr().out
    assert "final score" in table and "final val acc" not in table and "time/run" in table
    assert "Final values of the metrics the program logged" in table
    # plugdrop report reads the folder the same way, at any time
    assert pd.__name__ and main_report(out) == 0


def main_report(out: Path) -> int:
    from plugdrop.cli import main

    return main(["report", str(out), "--no-plots"])


def test_records_with_steps_repeats_and_torn_lines_are_read_as_logged(tmp_path):
    from plugdrop.ablate.runs.records import last_value, logged_names, parse_records

    lines = ['{"step": 10, "loss": 1.0}', 'not json', '{"epoch": 1, "step": 20, "m": 0.5}',
             '{"step": 10, "loss": 0.9, "extra": "text"}', '{"epoch": -1, "m": 1}',
             '{"step": 30, "m": NaN}', '{"step": 40, "m": 0.7']
    records, warnings = parse_records(lines)
    assert records == [{"epoch": 1, "step": 20, "m": 0.5},
                       {"step": 10, "loss": 0.9, "extra": "text"}, records[2]]
    assert len(warnings) == 2 and "line 2" in warnings[0] and "line 5" in warnings[1]
    assert logged_names(records) == ["m", "loss"]
    value, rec = last_value(records, "m")
    assert value != value and rec["step"] == 30  # NaN: the last logged value
    assert last_value(records, "loss") == (0.9, records[1])


# --------------------------------------------------------------------------------- failures


WRAP = """\
#!/bin/sh
# each variant misbehaves its own way
case "$PLUGDROP_VARIANT" in
  crash) exec {py} fake.py --fail 3 ;;
  killed) exec {py} fake.py --kill-self ;;
  hangs) exec {py} fake.py --hang ;;
  nan) exec {py} fake.py --nan ;;
  noscore) exec {py} fake.py --no-score ;;
  silent) exec {py} fake.py --epochs 0 ;;
  *) exec {py} fake.py ;;
esac
"""


@pytest.mark.slow
def test_every_failure_is_one_line_and_the_other_runs_finish(tmp_path, monkeypatch, capsys):
    variants = "  baseline: []\n" + "".join(
        f"  {v}: [{{layers: x, transform: Dropout, p: 0.1}}]\n"
        for v in ("crash", "killed", "hangs", "nan", "noscore", "silent"))
    folder(tmp_path, monkeypatch, config("./wrap.sh", variants=variants,
                                         extra="run_timeout: 1s\n"))
    (tmp_path / "wrap.sh").write_text(WRAP.format(py=PY))
    (tmp_path / "wrap.sh").chmod(0o755)
    assert ablate() == 1
    out = tmp_path / "out"
    assert (run_dir(out, "baseline__s0") / "done.json").exists()
    want = {
        # a Python program's exception first, then the end of its stderr
        "crash": "the program exited with status 3: RuntimeError: boom in crash seed 0 (its "
                 "stderr ends: Traceback (most recent call last): | File \"fake.py\", line 1, "
                 "in <module>)",
        "killed": "the program was killed by SIGKILL (signal 9)",
        "hangs": "the program ran longer than run_timeout 1s and was ended",
        "nan": "the run diverged: the last score it logged is nan (epoch 3)",
        "noscore": "the program exited with status 0 but logged no value of score (decide_on); "
                   "it logged loss",
        "silent": "the program exited with status 0 but logged no value of score (decide_on); "
                  "its metrics file (PLUGDROP_METRICS, "}
    err = capsys.readouterr().err
    for v, line in want.items():
        record = failed(out, f"{v}__s0")
        assert record["error"].startswith(line), (v, record["error"])
        assert "\n" not in record["error"]
        assert Path(record["logs"]["stderr"]).exists() and Path(record["logs"]["stdout"]).exists()
        assert f"[{v} seed=0] failed: {line}" in err, v
    assert failed(out, "crash__s0")["exit_status"] == 3
    assert failed(out, "crash__s0")["stderr"][-1] == "RuntimeError: boom in crash seed 0"
    assert failed(out, "killed__s0")["signal"] == "SIGKILL (signal 9)"
    assert failed(out, "hangs__s0")["timed_out"] is True
    table = (out / "results.json").read_text()
    assert "RuntimeError: boom in crash seed 0" in table
    page = (out / "report.html").read_text()
    assert "killed by SIGKILL" in page
    # every attempt's output is kept; --resume runs the failed ones again, resuming
    assert ablate("--resume") == 1
    assert [s["resumed"] for s in starts(out, "crash__s0")] == [False, True]
    assert (run_dir(out, "crash__s0") / "logs" / "attempt-2.stderr").exists()
    assert (run_dir(out, "crash__s0") / "logs" / "attempt-1.stderr").read_text()


@pytest.mark.parametrize("program,message", [
    ('[nothere, --x]', "program: 'nothere' is not found on PATH"),
    ("./missing.sh", "program: ./missing.sh does not exist in"),
    ("./cfg.yaml", "program: ./cfg.yaml is not executable; chmod +x ./cfg.yaml"),
    (f"[{PY}, train.py]", "is given the script train.py, which does not exist in"),
    (f"[{PY}, fake.py, '{{sed}}']", "names {sed} (did you mean 'seed'?); the placeholders are"),
    ("\"python 'unclosed\"", "program: No closing quotation"),
    ("[]", "program must be the command that trains one run"),
], ids=["not-found", "no-file", "not-executable", "no-script", "placeholder", "quote", "empty"])
def test_a_program_that_cannot_start_is_one_line_before_any_run(tmp_path, monkeypatch, capsys,
                                                                program, message):
    folder(tmp_path, monkeypatch, config(program))
    assert ablate() == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------- the config's checks


@pytest.mark.parametrize("given,where", [
    ("epochs: 3\n", "cfg.yaml:5:1"), ("--set lr=0.1", "--set lr"), ("--epochs 3", "--epochs"),
    ("--device cpu", "--device"), ("model: resnet18\n", "cfg.yaml:5:1"),
    ("checkpoint_every: 5min\n", "cfg.yaml:5:1")])
def test_the_settings_of_plugdrops_own_loop_are_refused_with_a_program(
        tmp_path, monkeypatch, capsys, given, where):
    extra, flags = (given, []) if given.endswith("\n") else ("", given.split())
    folder(tmp_path, monkeypatch, config(fake(), extra=extra))
    assert ablate(*flags) == 2
    key = (given.split(":")[0] if extra else flags[-2].lstrip("-").split("=")[0]
           if flags[0] != "--set" else "lr").replace("-", "_")
    err = capsys.readouterr().err
    assert err == (f"plugdrop ablate: {where}: {key} is a setting of plugdrop's own training "
                   f"loop, which does not run with program: (the program trains); remove it\n")


@pytest.mark.parametrize("text,message", [
    ("program: [x]\nvariants: {baseline: []}\n",
     "with program:, say which metric the verdicts compare"),
    ("program: [x]\ndecide_on: {metric: miou, goal: max}\nvariants: {baseline: []}\n",
     "decide_on: miou is not a metric plugdrop knows, so it has no margin of its own: give "
     "margin:"),
    ("program: [x]\ndecide_on: {metric: miou}\nvariants: {baseline: []}\n",
     "give its goal, {metric: miou, goal: max}"),
    ("program: [x]\ndecide_on: {metric: val_loss, goal: max}\nvariants: {baseline: []}\n",
     "decide_on: val_loss is better when lower: goal min, or leave goal out"),
    ("program: [x]\ndecide_on: {metric: m, goal: up}\nmargin: 1\nvariants: {baseline: []}\n",
     "decide_on goal must be max or min"),
    ("program: [x]\ndecide_on: {metric: m, gaol: max}\nvariants: {baseline: []}\n",
     "decide_on has no setting 'gaol' (did you mean 'goal'?)"),
    ("model: resnet18\ndecide_on: {metric: m, goal: max}\nmargin: 1\nvariants: {b: []}\n",
     "decide_on: m is no metric plugdrop's trainer records"),
    ("model: resnet18\nrun_timeout: 1h\nvariants: {b: []}\n",
     "run_timeout ends a program that runs too long; it needs program:"),
    ("program: [x]\ndecide_on: val_acc\nrun_timeout: 500steps\nvariants: {b: []}\n",
     "run_timeout must be a duration such as 2h, 30min or 90s"),
    ("variants: {b: []}\n", "the config needs 'model:' (a timm model name such as resnet18), "
                            "or 'program:'"),
], ids=["decide-required", "margin-required", "goal-required", "goal-against", "goal-word",
        "typo", "custom-builtin", "timeout-builtin", "timeout-steps", "model-or-program"])
def test_what_a_program_config_must_say(text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        C.loads(text, "cfg.yaml")


def test_a_program_config_resolves_without_the_loops_settings_and_hashes_its_folder(tmp_path,
                                                                                 monkeypatch):
    text = config("python train.py --seed {seed}", seeds=ADAPTIVE)
    monkeypatch.chdir(tmp_path)
    cfg = C.loads(text)
    assert cfg.program is not None and cfg.program.argv == ("python", "train.py", "--seed",
                                                             "{seed}")
    assert C.loads(config("[python, train.py, --seed, '{seed}']", seeds=ADAPTIVE)).hash() \
        == cfg.hash()  # a string is split as a shell would
    resolved = cfg.resolved()
    assert set(C.settings()) - set(resolved) == set(C.schema.loop_settings())
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert C.loads(text).hash() != cfg.hash()  # the program runs in the folder it started in
    assert C.parse(resolved).resolved() == resolved  # what ablation.json records reads back
    builtin = C.loads("model: resnet18\nvariants: {baseline: []}\n")
    assert "epochs" in builtin.resolved() and builtin.program is None
    assert C.settings()["epochs"].loop and not C.settings()["seeds"].loop
    assert C.settings()["device"].loop and not C.settings()["program"].loop
    assert "`program`" in C.reference() and "`run_timeout`" in C.reference()


@pytest.mark.slow
def test_resuming_from_another_folder_is_one_line(tmp_path, monkeypatch, capsys):
    folder(tmp_path, monkeypatch, config(fake(), variants="  baseline: []\n"))
    assert ablate() == 0
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    from plugdrop.cli import main

    assert main(["ablate", "../cfg.yaml", "--out", "../out", "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"its program runs in {tmp_path}, the folder the ablation started in" in err
    assert err.count("\n") == 1


def test_torchrun_and_nproc_per_run_are_the_programs_business(tmp_path, monkeypatch, capsys):
    folder(tmp_path, monkeypatch, config(fake()))
    assert ablate("--launcher", "processes", "--nproc-per-run", "2") == 2
    err = capsys.readouterr().err
    assert "--nproc-per-run 2: with program:, the program starts its own processes" in err
    assert "program: torchrun --standalone --nproc_per_node 2 train.py" in err


# ------------------------------------------------------------------------ signals and kills


@pytest.mark.slow
@pytest.mark.parametrize("sig,ignores", [(signal.SIGTERM, False), (signal.SIGUSR2, False),
                                         (signal.SIGTERM, True)],
                         ids=["sigterm", "sigusr2", "sigterm-ignored-then-killed"])
def test_a_signal_is_passed_to_the_program_and_the_run_resumes(tmp_path, monkeypatch, capsys,
                                                               sig, ignores):
    args = ["--sleep", "0.25", "--epochs", "4"] + (["--ignore-term"] if ignores else [])
    folder(tmp_path, monkeypatch, config(fake(*args), variants="  baseline: []\n"))
    monkeypatch.setattr(process, "GRACE_S", 0.5)
    metrics = tmp_path / "out" / "runs" / "baseline__s0" / "metrics.jsonl"
    late: list[int] = []
    old = signal.signal(sig, lambda s, f: late.append(s))  # a late signal must not end pytest

    def send() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (metrics.exists() and metrics.read_text()):
            time.sleep(0.01)
        os.kill(os.getpid(), sig)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        code = ablate()
    finally:
        sender.join()
        signal.signal(sig, old)
    assert code == 128 + sig and not late
    out = tmp_path / "out"
    assert not (run_dir(out, "baseline__s0") / "failed.json").exists()
    assert not (run_dir(out, "baseline__s0") / "done.json").exists()
    err = capsys.readouterr().err
    assert f"stopped: the program was passed {signal.Signals(sig).name} and exited" in err
    assert "each program was passed the signal" in err
    assert ablate("--resume") == 0
    first, second = starts(out, "baseline__s0")
    assert (first["resumed"], second["resumed"], second["from"]) == (False, True,
                                                                     second["from"])
    assert second["from"] > 1 and second["env"]["PLUGDROP_RESUME"] == "1"


@pytest.mark.slow
def test_a_program_killed_by_a_signal_fails_then_resumes(tmp_path, monkeypatch, capsys):
    folder(tmp_path, monkeypatch, config(fake("--kill-self", "--once", "killed-once"),
                                         variants=BASE_GOOD))
    assert ablate() == 1  # the first program killed itself; the other run finished
    out = tmp_path / "out"
    assert failed(out, "baseline__s0")["error"].startswith(
        "the program was killed by SIGKILL (signal 9)")
    assert (run_dir(out, "good__s0") / "done.json").exists()
    assert ablate("--resume") == 0
    assert [(s["resumed"], s["from"]) for s in starts(out, "baseline__s0")] == [(False, 1),
                                                                                (True, 2)]
    lines = (run_dir(out, "baseline__s0") / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [1, 2, 3]


def _drive() -> None:
    """``plugdrop ablate`` in a forked child, its output discarded."""
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
    os._exit(ablate())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_sigkill_of_the_driver_then_resume_makes_the_same_decisions(tmp_path, monkeypatch):
    reference = tmp_path / "reference"
    reference.mkdir()
    folder(reference, monkeypatch, config(fake(), seeds=ADAPTIVE, variants=BASE_GOOD))
    assert ablate() == 0
    want = decisions(reference / "out")
    killed = tmp_path / "killed"
    killed.mkdir()  # the same metrics, logged slowly enough to be killed in the middle
    folder(killed, monkeypatch, config(fake("--sleep", "0.1"), seeds=ADAPTIVE,
                                       variants=BASE_GOOD))
    out = killed / "out"
    # the driver: a process of its own (forked, so that it need not import plugdrop again)
    driver = multiprocessing.get_context("fork").Process(target=_drive, daemon=True)
    driver.start()
    run = "baseline__s1"  # killed while its program trains
    deadline = time.monotonic() + 240
    while not (run_dir(out, run) / "metrics.jsonl").exists():
        assert driver.is_alive(), f"the driver ended early ({driver.exitcode})"
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.01)
    os.kill(driver.pid, signal.SIGKILL)
    driver.join()
    (start,) = starts(out, run)
    deadline = time.monotonic() + 10
    while _alive(start["pid"]):  # killed with its driver: no program is left behind
        assert time.monotonic() < deadline, "the program outlived its driver"
        time.sleep(0.05)
    assert not (run_dir(out, run) / "done.json").exists()
    assert ablate("--resume") == 0
    assert decisions(out) == want
    assert [s["resumed"] for s in starts(out, run)] == [False, True]
    assert verdicts(out) == verdicts(reference / "out")


# ----------------------------------------------------------------------------------- security


@pytest.mark.slow
def test_a_stored_config_whose_program_was_changed_never_runs(tmp_path, monkeypatch, capsys):
    from plugdrop.ablate import worker
    from plugdrop.ablate.errors import Exit

    folder(tmp_path, monkeypatch, config(fake(), variants="  baseline: []\n"))
    assert ablate() == 0
    out, run = tmp_path / "out", "baseline__s0"
    launcher_hash = C.load("cfg.yaml").hash()  # what a launcher hands its jobs
    marker = tmp_path / "MARKER"
    evil = f"open({str(marker)!r}, 'w').close()\n"
    (tmp_path / "evil.py").write_text(evil)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "fake.py").write_text(evil)
    original = (out / ".config.json").read_text()
    (run_dir(out, run) / "done.json").unlink()
    planted = []
    for change in ("program", "cwd"):  # someone who can write --out changes what would run
        stored = json.loads(original)
        if change == "program":
            stored["text"] = stored["text"].replace("fake.py", "evil.py")
        else:
            stored["cwd"] = str(tmp_path / "elsewhere")
        (out / ".config.json").write_text(json.dumps(stored))
        planted.append(stored)
        for args in (["--config-hash", launcher_hash], []):
            assert worker.main([str(out), run, *args]) == Exit.MISTAKE
            err = capsys.readouterr().err
            assert "the stored config is not the one this ablation started with" in err
    assert not marker.exists()
    # the spec file handed to a program is written afresh, never taken from the folder
    elsewhere = tmp_path / "not-ours.yaml"
    elsewhere.write_text('[{"layers": "x", "transform": "DropBlock", "p": 0.5, "block_size": 3}]')
    spec = run_dir(out, run) / "spec.yaml"
    spec.unlink()
    spec.symlink_to(elsewhere)
    assert ablate("--resume") == 0  # the user's config, stored again from the user's file
    assert not marker.exists()
    assert json.loads((run_dir(out, run) / "work" / "spec.copy").read_text()) == []
    assert not spec.is_symlink() and "DropBlock" in elsewhere.read_text()


@pytest.mark.slow
def test_shards_split_a_programs_runs(tmp_path, monkeypatch):
    folder(tmp_path, monkeypatch, config(fake(), seeds="[0, 1]", variants=BASE_GOOD))
    assert ablate("--shard", "1/2") == 0
    out = tmp_path / "out"
    done = {r.name for r in (out / "runs").iterdir() if (r / "done.json").exists()}
    assert len(done) == 2
    assert ablate("--shard", "2/2") == 0
    assert verdicts(out)["good"] == "too few seeds"  # every run of the two shards is in
    assert all((r / "done.json").exists() for r in (out / "runs").iterdir())

"""Preemption loses minutes, not epochs: a run stopped at any optimizer step (a signal, a kill)
resumes at the step its last checkpoint holds and ends with exactly the metrics of an
uninterrupted run, DataLoader workers and random augmentation included; ``attempts.jsonl``
says where each attempt started; the driver leaves no job behind.

Stops at a chosen step are made by raising the flag a signal would raise at the N-th poll of
the training loop (in this process); real signals (SIGTERM, SIGUSR2, SIGKILL) are sent to
``plugdrop ablate`` subprocesses and to a launcher's job."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from _gen import image_folder
from _runner_helpers import (  # noqa: F401 (reference: a fixture)
    Driver, cli, popen, reference, write)

from plugdrop.ablate import config
from plugdrop.ablate.train import signals
from plugdrop.ablate.config import Interval
from plugdrop.ablate.train.cadence import Cadence
from plugdrop.cli import main

TIMING = {"epoch_time", "images_per_s"}

#: digits at 8 px, 64 images a step: 22 optimizer steps an epoch; EMA, a ramp, the watch
CFG = """\
model: tinynet:make
data: digits
image_size: 8
epochs: 2
batch_size: 64
seeds: [0]
device: cpu
gradcam: false
plots: false
ema: true
checkpoint_every: {every}
variants:
  dropblock:
    - {{layers: "layer1.*", transform: DropBlock, p: {{schedule: linear, start: 0.0, end: 0.2}},
       block_size: 3}}
"""
STEPS = 22


def rows(out: Path) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if k not in TIMING}
            for r in csv.DictReader((out / "results.csv").open())]


def attempts(out: Path) -> list[dict]:
    path = next((out / "runs").glob("*/attempts.jsonl"))
    return [json.loads(x) for x in path.read_text().splitlines()]


def ablate(cfg: Path, out: Path, *extra: str) -> int:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return main(["ablate", str(cfg), "--out", str(out), *extra])
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def signal_at(monkeypatch):
    """``signal_at(n)``: the n-th poll of the training loop sees SIGTERM (0: never)."""
    seen = {"n": 0, "at": 0}
    poll = signals.StopFlag.poll

    def polled(self, d, due=False, every=1, i=0):
        seen["n"] += 1
        if seen["n"] == seen["at"]:
            self.signum = signal.SIGTERM
        return poll(self, d, due, every, i)

    monkeypatch.setattr(signals.StopFlag, "poll", polled)

    def arm(n: int) -> None:
        seen.update(n=0, at=n)
    return arm


@pytest.fixture(scope="module")
def ref(reference) -> Path:
    return reference(CFG.format(every="false"))


# Polls: one after each step, one more after an epoch's last (a signal there keeps the
# epoch's training and goes straight to evaluation on resume).
@pytest.mark.slow
@pytest.mark.parametrize("poll,step", [(1, 1), (9, 9), (STEPS, STEPS), (STEPS + 1, STEPS),
                                       (STEPS + 1 + 7, STEPS + 7)])
def test_a_run_stopped_at_any_step_resumes_there_exactly(ref, tmp_path, signal_at, capsys,
                                                         poll, step):
    cfg = write(tmp_path, CFG.format(every="false"))  # the signal's own checkpoint only
    signal_at(poll)
    assert ablate(cfg, tmp_path / "out") == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert "stopped by SIGTERM; checkpointed at that step" in err or "Resume with" in err
    signal_at(0)
    assert ablate(cfg, tmp_path / "out", "--resume") == 0
    assert rows(tmp_path / "out") == rows(ref)
    first, second = attempts(tmp_path / "out")
    assert (first["start_epoch"], first["start_step"]) == (1, 0)
    assert (second["start_epoch"], second["start_step"]) == (1 + (step - 1) // STEPS, step)


@pytest.mark.slow
def test_a_steps_interval_checkpoints_in_the_middle_of_epochs(ref, tmp_path, monkeypatch):
    """``checkpoint_every: 5steps``: a checkpoint every 5 optimizer steps of the run (and at
    every epoch end), none of which changes a number."""
    from plugdrop.ablate.runs import RunDir

    seen: list[tuple[int, bool]] = []
    save = RunDir.save_checkpoint

    def saved(self, state):
        seen.append((state["step"], state["position"] is not None))
        return save(self, state)

    monkeypatch.setattr(RunDir, "save_checkpoint", saved)
    assert ablate(write(tmp_path, CFG.format(every="5steps")), tmp_path / "out") == 0
    assert seen == [(5, True), (10, True), (15, True), (20, True), (22, False), (25, True),
                    (30, True), (35, True), (40, True), (44, False)]
    seen.clear()  # 11 divides an epoch's 22 steps: its end is checkpointed once, not twice
    assert ablate(write(tmp_path, CFG.format(every="11steps")), tmp_path / "o2") == 0
    assert seen == [(11, True), (22, False), (33, True), (44, False)]
    assert rows(tmp_path / "out") == rows(ref)


@pytest.mark.slow
def test_workers_and_random_augmentation_resume_exactly(tmp_path, signal_at):
    """An ImageFolder with timm's random augmentation loaded by 2 worker processes: each
    sample's augmentation is seeded by (seed, epoch, sample), so the rest of an epoch after a
    resume draws what the uninterrupted epoch drew."""
    root = image_folder(tmp_path / "imgs", per_class=12)
    text = f"""\
model: tinynet:make
data: {root}
image_size: 8
workers: 2
augment: {{hflip: 0.5, scale: [0.5, 1.0]}}
epochs: 2
batch_size: 4
seeds: [0]
device: cpu
gradcam: false
plots: false
checkpoint_every: false
variants:
  dropblock:
    - {{layers: "layer1.*", transform: DropBlock, p: 0.1, block_size: 3}}
"""
    cfg = write(tmp_path, text)
    signal_at(0)
    assert ablate(cfg, tmp_path / "ref") == 0
    signal_at(4)  # in the middle of the first epoch (7 steps)
    assert ablate(cfg, tmp_path / "out") == 128 + signal.SIGTERM
    signal_at(0)
    assert ablate(cfg, tmp_path / "out", "--resume") == 0
    assert attempts(tmp_path / "out")[-1]["start_step"] == 4
    assert rows(tmp_path / "out") == rows(tmp_path / "ref")


# --------------------------------------------------------------------------- real signals


def start(cfg: Path, out: Path) -> subprocess.Popen | Driver:
    return popen("ablate", str(cfg), "--out", str(out))


def first_mid_epoch_checkpoint(out: Path, proc: subprocess.Popen | Driver) -> None:
    """Wait until the run's first checkpoint (of step 5: mid-epoch) is in place."""
    t0 = time.monotonic()
    while not list(out.glob("runs/*/checkpoint.pt")):
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() - t0 < 240
        time.sleep(0.005)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR2])  # SIGUSR1: as SIGUSR2
def test_a_signal_checkpoints_the_step_and_resume_is_exact(ref, tmp_path, sig):
    cfg = write(tmp_path, CFG.format(every="5steps"))
    out = tmp_path / "out"
    proc = start(cfg, out)
    first_mid_epoch_checkpoint(out, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 128 + sig, err[-2000:]
    assert "Traceback" not in err
    assert f"--out {out} --resume" in err
    stopped = attempts(out)[0]
    state = torch.load(next(out.glob("runs/*/checkpoint.pt")), weights_only=True)
    assert state["step"] >= 5 and state["position"] is not None or state["step"] % STEPS == 0
    assert ablate(cfg, out, "--resume") == 0
    assert attempts(out)[1]["start_step"] == state["step"] and stopped["start_step"] == 0
    assert rows(out) == rows(ref)


@pytest.mark.slow
def test_sigkill_loses_at_most_the_interval(ref, tmp_path):
    cfg = write(tmp_path, CFG.format(every="5steps"))
    out = tmp_path / "out"
    proc = start(cfg, out)
    first_mid_epoch_checkpoint(out, proc)
    proc.kill()
    proc.communicate(timeout=60)
    kept = torch.load(next(out.glob("runs/*/checkpoint.pt")), weights_only=True)["step"]
    assert kept >= 5 and kept % 5 == 0
    assert ablate(cfg, out, "--resume") == 0
    assert attempts(out)[-1]["start_step"] == kept
    assert rows(out) == rows(ref)


@pytest.mark.slow
def test_a_job_stopped_by_sigterm_is_submitted_again_and_resumes_at_its_step(ref, tmp_path):
    """``--launcher processes``: SIGTERM to the job's worker process (what a scheduler sends)
    makes it checkpoint its step and exit 128 + 15; the driver submits the run again and the
    new job resumes at that step."""
    cfg = write(tmp_path, CFG.format(every="5steps"))
    out = tmp_path / "out"
    proc = popen("ablate", str(cfg), "--out", str(out), "--launcher", "processes",
                 "--max-parallel", "1")
    first_mid_epoch_checkpoint(out, proc)
    worker = attempts(out)[0]["pid"]
    import os

    os.kill(worker, signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert "ended before the run did; submitting it again (1/3)" in err
    first, second = attempts(out)
    assert second["start_step"] >= 5 and second["pid"] != first["pid"]
    assert rows(out) == rows(ref)


@pytest.mark.slow
def test_under_torchrun_every_rank_stops_at_the_same_step(tmp_path):
    """SIGTERM to torchrun (which hands it to its ranks): the ranks agree on the step, each
    keeps its own position in the checkpoint, and the resumed run finishes; under torchrun,
    ``batch_size`` is the global batch (the ranks share it: 22 steps an epoch, as in one
    process) and the summary is printed once, by rank 0."""
    cfg = write(tmp_path, CFG.format(every="5steps").replace("epochs: 2", "epochs: 3"))
    out = tmp_path / "out"
    # torchrun's agent forked warm (its ranks are fresh interpreters, as torchrun starts them)
    args = ["--standalone", "--nproc_per_node", "2", "-m", "plugdrop", "ablate", str(cfg),
            "--out", str(out)]
    proc = popen(*args, module="torch.distributed.run")
    first_mid_epoch_checkpoint(out, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode != 0 and "Traceback" not in err.split("plugdrop ablate")[0], err
    state = torch.load(next(out.glob("runs/*/checkpoint.pt")), weights_only=True)
    assert state["epoch"] < 3 and state["position"] is not None, state["step"]
    steps = {p["steps"] for p in state["position"]}
    assert len(state["position"]) == 2 and len(steps) == 1  # the same step on both ranks
    done = cli(*args, "--resume", module="torch.distributed.run")
    assert done.returncode == 0, done.stderr[-3000:]
    assert attempts(out)[-1]["start_step"] == state["step"]
    assert "x 2 processes" in done.stdout and done.stdout.count("runs finished") == 1
    last = json.loads(next(out.glob("runs/*/metrics.jsonl")).read_text().splitlines()[-1])
    assert last["epoch"] == 3 and last["step"] == 3 * STEPS  # the global batch


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2])
def test_every_scheduler_signal_raises_the_flag_and_the_old_handler_comes_back(sig):
    import os

    from plugdrop.ablate.train import StopFlag

    before = signal.getsignal(sig)
    flag = StopFlag()
    flag.install()
    try:
        os.kill(os.getpid(), sig)
        assert flag.signum == sig and flag.previous[sig] is before
    finally:
        flag.restore()
    assert signal.getsignal(sig) is before


# --------------------------------------------------------------------------- the setting


@pytest.mark.parametrize("value,normalized", [("30min", "30min"), ("90s", "90s"),
                                              ("2h", "2h"), ("500steps", "500steps"),
                                              ("1 step", "1steps"), (False, False)])
def test_checkpoint_every_takes_a_duration_or_steps(value, normalized):
    cfg = config.parse({"model": "m", "variants": {"a": []}, "checkpoint_every": value})
    assert cfg.resolved()["checkpoint_every"] == normalized
    every = cfg.checkpoint_every  # typed: the trainer reads it without parsing again
    assert every is False or (every.steps, every.seconds) in ((500, 0.0), (1, 0.0),
                                                              (0, 1800.0), (0, 90.0),
                                                              (0, 7200.0))
    assert "checkpoint_every" in config.unhashed()  # changing it resumes the same runs


@pytest.mark.parametrize("value,message", [
    (5, "(give a unit: 30min, 500steps)"), ("soon", "a duration such as 30min"),
    ("0min", "a duration such as 30min"), ("1.5steps", "a whole number of steps")])
def test_checkpoint_every_mistakes_are_one_line(value, message):
    from plugdrop.ablate.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        config.parse({"model": "m", "variants": {"a": []}, "checkpoint_every": value})


def test_the_cadence_counts_steps_over_the_run_and_time_on_the_clock():
    steps = Cadence(Interval.parse("500steps"))
    assert steps.due(500) == (True, False) and steps.due(501) == (False, False)
    clock = Cadence(Interval.parse("30min"))
    assert clock.due(1, now=clock.last + 1799.5) == (False, False)
    assert clock.due(1, now=clock.last + 1800.5) == (False, True)
    clock.done()
    assert clock.due(2, now=clock.last + 10) == (False, False)
    assert Cadence(False).due(10 ** 6, now=clock.last + 10 ** 9) == (False, False)

"""Scaling out: ``--shard`` processes side by side, ``--launcher submitit`` (submitit's local
executor: real separate processes) and ``--launcher ray`` (a local Ray cluster on 2 CPUs) give
the results table of the local sequential runner; a preempted / killed job is requeued or
retried and its run resumes from its checkpoint (epoch 1 is not trained again); Ray's jobs run a
``program:`` too; every user mistake is one line."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from _runner_helpers import (  # noqa: F401 (ray_cluster: a fixture)
    SMALL, cli, popen, ray_cluster, reference, write)

from plugdrop.ablate.errors import Fault
from plugdrop.ablate.launch.protocol import Ending, JobEnd
from plugdrop.ablate.outcome import RunResult
from plugdrop.cli import main

# 2 variants x 2 seeds, 3 epochs at 8 px: a kill after epoch 1 leaves two epochs to resume.
CFG = SMALL.replace("epochs: 2", "epochs: 3").replace("seeds: [0]", "seeds: [0, 1]")

TIMING = {"epoch_time", "images_per_s"}


def rows(out: Path) -> list[dict[str, str]]:
    """results.csv without the timing columns (the only ones that may differ)."""
    return [{k: v for k, v in r.items() if k not in TIMING}
            for r in csv.DictReader((out / "results.csv").open())]


def table(out: Path) -> list[str]:
    """The report's table (rebuilt from the run folders) without its time column."""
    from plugdrop.ablate.report import write_report

    lines = write_report(out, plots=False).table.splitlines()
    start = next(i for i, line in enumerate(lines) if "time/epoch" in line)
    end = lines.index("", start)
    cut = lines[start].index("time/epoch")
    return [line[:cut].rstrip() for line in lines[start:end]]


def attempts(out: Path, run: str) -> list[dict]:
    path = out / "runs" / run / "attempts.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def ref(reference) -> Path:
    """The local sequential runner's results (one thread, like every launcher's job)."""
    return reference(CFG)


def kill_after_first_epoch(out: Path, run: str, sig: int, driver: subprocess.Popen | None = None,
                           timeout: float = 240) -> str:
    """Wait for the first checkpoint of ``run``, then send ``sig`` to the process training it;
    returns epoch 1's metrics line as it was then."""
    ckpt = out / "runs" / run / "checkpoint.pt"
    t0 = time.monotonic()
    while not (ckpt.exists() and attempts(out, run)):
        if driver is not None and driver.poll() is not None:
            raise AssertionError(f"the driver ended early: {driver.stderr.read()[-2000:]}")
        assert time.monotonic() - t0 < timeout, f"no checkpoint of {run} appeared"
        time.sleep(0.005)
    pid = attempts(out, run)[-1]["pid"]
    os.kill(pid, sig)
    assert not (out / "runs" / run / "done.json").exists(), "the run ended before the kill"
    return (out / "runs" / run / "metrics.jsonl").read_text().splitlines()[0]


def assert_resumed(out: Path, run: str, first_line: str, launcher: str) -> None:
    """The run was started twice and the second start began at epoch 2: epoch 1's record is
    the one written before the kill (its measured epoch time included), not a retrained one."""
    tries = attempts(out, run)
    assert [t["start_epoch"] for t in tries] == [1, 2], tries
    assert {t["launcher"] for t in tries} == {launcher}
    lines = (out / "runs" / run / "metrics.jsonl").read_text().splitlines()
    assert lines[0] == first_line
    assert [json.loads(x)["epoch"] for x in lines] == [1, 2, 3]


# ----------------------------------------------------------------------- one-line mistakes


@pytest.mark.parametrize("flags,message", [
    (["--shard", "1-2"], "--shard '1-2': write I/N, e.g. --shard 1/4"),
    (["--shard", "0/2"], "--shard 0/2: shards count from 1"),
    (["--shard", "3/2"], "--shard 3/2: there are only 2 shards"),
    (["--shard", "1/0"], "--shard 1/0: N must be at least 1"),
    (["--launcher", "slurm"], "--launcher 'slurm': choose one of local, processes, submitit, ray"),
    (["--address", "x:1"], "--address is an option of --launcher ray, not of --launcher local"),
    (["--launcher", "ray", "--cpus-per-run", "0"], "--cpus-per-run 0: must be at least 1"),
    (["--launcher", "ray", "--address", "127.0.0.1:1"],
     "--address 127.0.0.1:1: no Ray cluster answers there"),
    (["--launcher", "submitit", "--nproc-per-run", "3"],
     "batch_size 128 is the global batch; it must divide by processes x grad_accum = 3 x 1"),
], ids=["syntax", "zero", "too-big", "no-shards", "launcher", "address-local", "cpus",
        "address-unreachable", "nproc-batch"])
def test_mistakes_are_one_line(tmp_path, capsys, flags, message):
    assert main(["ablate", str(write(tmp_path, CFG)), "--out", str(tmp_path / "o"),
                 *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name,extra", [("ray", "ray"), ("submitit", "slurm")])
def test_missing_extra_gives_the_install_command(tmp_path, capsys, monkeypatch, name, extra):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda mod, *a: None if mod == name else real(mod, *a))
    assert main(["ablate", str(write(tmp_path, CFG)), "--launcher", name]) == 2
    err = capsys.readouterr().err
    assert err == (f"plugdrop ablate: --launcher {name} needs the {name} package: "
                   f"pip install 'plugdrop[{extra}]'\n")


# --------------------------------------------------------------------------------- shards


def test_a_run_that_ended_since_the_last_look_is_not_counted_as_running(tmp_path,
                                                                        monkeypatch):
    """The counts line: which runs hold their lock is looked at once a second, but a run that
    ended in between is done, not also still running (before: "queued -1, running 2")."""
    from plugdrop.ablate.launch import monitor
    from plugdrop.ablate.runs import FINISHED, RunDir

    held: set[str] = set()
    monkeypatch.setattr(monitor, "RunLock", lambda rd: SimpleNamespace(
        held_elsewhere=lambda: rd.id in held))
    runs = [RunDir(tmp_path, "v", s) for s in range(3)]
    m = monitor.Monitor(tmp_path, runs, tty=False)
    held.update({runs[0].id, runs[1].id})
    m.update(runs)
    assert m.counts() == monitor.Counts(queued=1, running=2, done=0, failed=0)
    m.ended(runs[0], FINISHED, None)  # before the next look
    m.update(runs)
    assert m.counts() == monitor.Counts(queued=1, running=1, done=1, failed=0)
    m.close()
    assert m.counts() == monitor.Counts(queued=2, running=0, done=1, failed=0)


def test_shard_assignment_is_stable_and_balanced():
    from plugdrop.ablate.launch.shard import select

    items = list(range(10))
    shares = [select(items, i, 3) for i in (1, 2, 3)]
    assert sorted(sum(shares, [])) == items and [len(s) for s in shares] == [4, 3, 3]
    assert select(items, 2, 3) == [1, 4, 7]


@pytest.mark.slow
def test_two_shards_at_once_merge_into_the_single_process_table(tmp_path, ref, capsys):
    out = tmp_path / "out"
    path = write(tmp_path, CFG)
    procs = [popen("ablate", str(path), "--out", str(out), "--shard", f"{i}/2") for i in (1, 2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    assert rows(out) == rows(ref)
    assert table(out) == table(ref)
    # the folder lock: a whole ablation refuses a folder that a shard holds
    from plugdrop.ablate import runs

    held = runs.Lock(out, shared=True)
    held.acquire()
    try:
        assert main(["ablate", str(path), "--out", str(out), "--resume"]) == 2
        assert "another plugdrop ablate is writing" in capsys.readouterr().err
    finally:
        held.release()
    # a shard started again without --resume refuses its own finished runs
    assert main(["ablate", str(path), "--out", str(out), "--shard", "1/2"]) == 2
    err = capsys.readouterr().err
    assert "holds runs of shard 1/2 already" in err and err.count("\n") == 1


# ------------------------------------------------------------------------------ submitit


@pytest.mark.slow
def test_submitit_local_preempted_and_killed_jobs_resume(tmp_path, ref):
    """Two jobs at once; one preempted (SIGUSR2, submitit's checkpoint-and-requeue), a later
    one killed (SIGKILL, submitted again by the driver); both resume at epoch 2."""
    pytest.importorskip("submitit", reason="the submitit extra is not installed")
    out = tmp_path / "out"
    driver = popen("ablate", str(write(tmp_path, CFG)), "--out", str(out), "--launcher",
                   "submitit", "--slurm-cluster", "local", "--max-parallel", "2")
    preempted = kill_after_first_epoch(out, "baseline__s0", signal.SIGUSR2, driver)
    # (a run of the second pair: it starts when a slot frees, so its first epoch is watched)
    killed = kill_after_first_epoch(out, "dropblock__s0", signal.SIGKILL, driver)
    printed, err = driver.communicate(timeout=300)
    assert driver.returncode == 0, err[-3000:]
    assert "4 runs to train through submitit" in printed
    assert_resumed(out, "baseline__s0", preempted, "submitit")
    assert_resumed(out, "dropblock__s0", killed, "submitit")
    assert "ended before the run did; submitting it again (1/3)" in err
    assert "runs: queued" in err and "done 4, failed 0" in err  # the progress view
    assert rows(out) == rows(ref)
    assert table(out) == table(ref)
    logs = "".join(p.read_text() for p in (out / ".submitit").rglob("*.out"))
    assert "resuming at epoch 2" in logs


class _EndedJob:
    """A Slurm job, as submitit answers for it, that ended in ``state`` (its result file
    there or not); asking for its result where submitit would wait for the file is seen."""

    def __init__(self, folder: Path, state: str, result: str | None) -> None:
        self.paths = SimpleNamespace(result_pickle=folder / "0_result.pkl")
        self.job_id, self.state, self._result, self.asked = "7", state, result, False
        if result is not None:
            self.paths.result_pickle.write_text("the result")

    def done(self) -> bool:
        return self.state != "RUNNING"

    def result(self) -> str:
        self.asked = True
        if self._result is None:
            raise RuntimeError("no result: submitit waited 15 s for its file first")
        return self._result


_FAULT = RunResult.faulted(Fault("disk full", "free space")).to_json()


@pytest.mark.parametrize("state,result,asked,end", [
    ("CANCELLED by 0", None, False, Ending.ENDED),  # scancel, a kill
    ("FAILED", None, False, Ending.ENDED),  # a job stopped for Slurm to requeue, a lost node
    ("NODE_FAIL", None, False, Ending.ENDED),
    ("COMPLETED", _FAULT, True, Ending.FAULT),  # the job sent its fault
    ("COMPLETED", None, True, Ending.ENDED),  # completed: its file may be late (NFS): waited for
    ("FAILED", _FAULT, True, Ending.FAULT),  # the file is there: read at once
], ids=["cancelled", "failed", "node-fail", "completed-fault", "completed-late", "failed-fault"])
def test_a_slurm_job_that_ended_without_a_result_is_not_waited_for(tmp_path, state, result,
                                                                     asked, end):
    """submitit waits up to 15 s for the result file of an ended job, stalling the driver: a
    job that Slurm did not see complete, without the file, has no result, and the driver takes
    its end at once (the run folder decides what follows)."""
    pytest.importorskip("submitit", reason="the submitit extra is not installed")
    from plugdrop.ablate.launch.submitit import _SlurmJob

    job = _EndedJob(tmp_path, state, result)
    got = _SlurmJob(None, job, tmp_path).poll()  # type: ignore[arg-type]
    assert got is not None and got.status is end and job.asked is asked


def test_a_slurm_job_that_wrote_its_result_ends_before_slurm_says_so(tmp_path):
    """The result file, written whole as the job's last act, ends the job for the driver at
    once: Slurm's accounting, which submitit's watcher reads once a minute for an old job,
    may still say RUNNING."""
    pytest.importorskip("submitit", reason="the submitit extra is not installed")
    from plugdrop.ablate.launch.submitit import _SlurmJob

    job = _EndedJob(tmp_path, "RUNNING", _FAULT)
    end = _SlurmJob(None, job, tmp_path).poll()  # type: ignore[arg-type]
    assert end is not None and end.status is Ending.FAULT and str(end.fault) == "disk full"
    job.paths.result_pickle.unlink()
    assert _SlurmJob(None, job, tmp_path).poll() is None  # type: ignore[arg-type]


def test_a_local_job_that_ended_without_a_result_is_not_waited_for(tmp_path):
    """On this machine (``--slurm-cluster local``) a job's result file is there when it ends,
    or never: a job killed or stopped for a requeue ends at once."""
    submitit = pytest.importorskip("submitit", reason="the submitit extra is not installed")
    from plugdrop.ablate.launch.submitit import _SlurmJob

    local = submitit.LocalJob(folder=tmp_path, job_id="1")  # ended: no process, no result
    local.result = lambda: pytest.fail("waited for the result of a local job without one")
    assert _SlurmJob(None, local, tmp_path).poll() == JobEnd(Ending.ENDED)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------- ray


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_ray_local_killed_worker_is_retried_and_resumes(tmp_path, ref, capsys):
    out = tmp_path / "out"
    path = write(tmp_path, CFG)
    result: list[int] = []
    driver = threading.Thread(target=lambda: result.append(main(
        ["ablate", str(path), "--out", str(out), "--launcher", "ray", "--cpus-per-run", "1"])))
    driver.start()
    try:
        first = kill_after_first_epoch(out, "baseline__s0", signal.SIGKILL)
    finally:
        driver.join(timeout=300)
    assert result == [0], capsys.readouterr().err[-3000:]
    import ray

    assert ray.is_initialized()  # the launcher leaves a cluster it did not start
    assert_resumed(out, "baseline__s0", first, "ray")
    assert all(len(attempts(out, f"{v}__s{s}")) == 1 for v, s in
               [("baseline", 1), ("dropblock", 0), ("dropblock", 1)])
    assert rows(out) == rows(ref)
    assert table(out) == table(ref)
    assert "done 4, failed 0" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_an_address_that_does_not_answer_is_refused_while_connected(tmp_path, capsys):
    """``--address`` names the cluster to use: refused when it does not answer, although this
    process is connected to another one (before: that one trained the runs, unsaid)."""
    assert main(["ablate", str(write(tmp_path, CFG)), "--out", str(tmp_path / "o"),
                 "--launcher", "ray", "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "--address 127.0.0.1:1: no Ray cluster answers there" in err
    assert err.count("\n") == 1 and not (tmp_path / "o" / "runs").exists()


@pytest.mark.usefixtures("ray_cluster")
def test_ray_waits_for_a_run_another_process_trains(tmp_path, capsys):
    """A run whose lock another process holds (an earlier driver's job, a shard) is not trained
    twice: its task returns at once, the driver waits for the lock, then submits it again."""
    from plugdrop.ablate import runs

    out = tmp_path / "out"
    held = runs.RunLock(runs.RunDir(out, "baseline", 0))
    result: list[int] = []
    driver = threading.Thread(target=lambda: result.append(main(
        ["ablate", str(write(tmp_path, CFG)), "--out", str(out), "--launcher", "ray",
         "--set", "seeds=[0]", "--set", "epochs=1"])))
    driver.start()
    try:
        while not (out / ".config.json").exists():  # prepared; the tasks start after the dry step
            assert driver.is_alive(), capsys.readouterr().err[-2000:]
            time.sleep(0.001)
        assert held.try_acquire(patience=0.0)
        other = out / "runs" / "dropblock__s0" / "done.json"
        while not other.exists():
            assert driver.is_alive(), capsys.readouterr().err[-2000:]
            time.sleep(0.05)
        time.sleep(1.0)
        assert driver.is_alive() and not attempts(out, "baseline__s0")  # turned away, waiting
    finally:
        held.release()
        driver.join(timeout=300)
    assert result == [0], capsys.readouterr().err[-3000:]
    assert len(attempts(out, "baseline__s0")) == 1
    assert (out / "runs" / "baseline__s0" / "done.json").exists()


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_ray_runs_a_training_program(tmp_path, monkeypatch):
    """A ``program:`` (a script of the user's) trains through Ray's jobs as through the local
    launcher: the same metrics logged per run (here, where the module's cluster is up)."""
    from _programs import ablate, config, fake, folder, run_dir

    variants = '  baseline: []\n  good:\n    - {layers: "layer1.*", transform: Dropout, p: 0.1}\n'
    folder(tmp_path, monkeypatch, config(fake(), variants=variants, extra="workdir: shared\n"))
    assert ablate("--launcher", "ray", "--max-parallel", "2") == 0
    local = tmp_path / "local"
    local.mkdir()
    folder(local, monkeypatch, config(fake(), variants=variants))
    assert ablate() == 0
    for run in ("baseline__s0", "good__s0"):
        assert (run_dir(tmp_path / "out", run) / "metrics.jsonl").read_text() == \
            (run_dir(local / "out", run) / "metrics.jsonl").read_text()
        assert json.loads((run_dir(tmp_path / "out", run) / "attempts.jsonl").read_text()
                          .splitlines()[0])["launcher"] == "ray"


@pytest.mark.slow
def test_worker_entry_point_runs_one_run(tmp_path, ref):
    """``python -m plugdrop.ablate.worker OUT RUN_ID`` on a folder whose run is gone: trains
    exactly that run; a finished run is left alone; a wrong id is one line."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(ref, out)
    shutil.rmtree(out / "runs" / "dropblock__s1")
    worker = "plugdrop.ablate.worker"
    proc = cli(str(out), "dropblock__s1", module=worker)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert table(out) == table(ref) and rows(out) == rows(ref)
    again = cli(str(out), "dropblock__s1", module=worker)
    assert again.returncode == 0 and len(attempts(out, "dropblock__s1")) == 1
    bad = cli(str(out), "nope__s0", module=worker)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "no run 'nope__s0' in this ablation" in bad.stderr



@pytest.mark.slow
def test_data_parallel_run_through_torchrun_inside_a_submitit_job(tmp_path):
    """``--nproc-per-run 2``: the job starts torchrun, whose 2 processes train the run with
    DistributedDataParallel (the global batch kept: 1438 // 128 steps per epoch)."""
    pytest.importorskip("submitit", reason="the submitit extra is not installed")
    out = tmp_path / "out"
    text = CFG.replace("epochs: 3", "epochs: 1").replace("seeds: [0, 1]", "seeds: [0]").replace(
        "  dropblock:\n    - {layers: \"layer1.*\", transform: DropBlock, p: 0.1, "
        "block_size: 3}\n", "")
    proc = cli("ablate", str(write(tmp_path, text)), "--out", str(out), "--launcher",
               "submitit", "--slurm-cluster", "local", "--nproc-per-run", "2",
               "--cpus-per-run", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [json.loads(x) for x in (out / "runs" / "baseline__s0" / "metrics.jsonl")
            .read_text().splitlines()]
    assert recs[-1]["step"] == 1438 // 128
    assert [a["launcher"] for a in attempts(out, "baseline__s0")] == ["submitit"]
    logs = "".join(p.read_text() for p in (out / ".submitit").rglob("*.err"))
    assert "Traceback" not in logs, logs[-2000:]


# ----------------------------------------------------------------------------- processes


@pytest.mark.slow
def test_processes_two_at_once_and_a_killed_one_resumes(tmp_path, ref):
    """``--launcher processes``: two runs at once, each a process of its own; one killed
    (SIGKILL) after its first epoch is started again by the driver and resumes at epoch 2."""
    out = tmp_path / "out"
    driver = popen("ablate", str(write(tmp_path, CFG)), "--out", str(out), "--launcher",
                   "processes", "--max-parallel", "2")
    killed = kill_after_first_epoch(out, "dropblock__s0", signal.SIGKILL, driver)
    printed, err = driver.communicate(timeout=300)
    assert driver.returncode == 0, err[-3000:]
    assert "4 runs to train through processes" in printed
    assert_resumed(out, "dropblock__s0", killed, "processes")
    assert "ended before the run did; submitting it again (1/3)" in err
    assert "done 4, failed 0" in err
    assert rows(out) == rows(ref)
    assert table(out) == table(ref)
    log = (out / ".processes" / "dropblock__s0.log").read_text()
    assert "resuming at epoch 2" in log


@pytest.mark.parametrize("flags,message", [
    (["--launcher", "processes", "--timeout-min", "5"],
     "--timeout-min is an option of --launcher submitit, not of --launcher processes"),
    (["--launcher", "processes", "--gpus-per-run", "64"],
     "--gpus-per-run 64: this machine has"),
    (["--launcher", "processes", "--max-parallel", "0"], "--max-parallel 0: must be at least 1"),
    # Before: every run's process failed on "CUDA is not available here" (it saw no GPU).
    # (This machine has none; with GPUs, each run gets one: test_launch_gpus.py.)
    (["--launcher", "processes", "--device", "cuda"],
     "--device: device: cuda, but this machine has no GPU for --launcher processes to give "
     "its runs"),
], ids=["not-its-option", "gpus", "parallel", "cuda-without-gpus"])
def test_processes_mistakes_are_one_line(tmp_path, capsys, flags, message):
    assert main(["ablate", str(write(tmp_path, CFG)), "--out", str(tmp_path / "o"),
                 *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("launcher", ["processes", "submitit", "ray"])
def test_a_cuda_device_needs_gpus_in_every_launchers_jobs(tmp_path, launcher):
    from plugdrop.ablate import config
    from plugdrop.ablate.errors import ConfigError

    cfg = config.load(write(tmp_path, CFG.replace("device: cpu", "device: cuda:1")))
    with pytest.raises(ConfigError, match=rf"device: cuda:1, but --launcher {launcher} gives"):
        config.check_gpus(cfg, launcher, 0)
    config.check_gpus(cfg, launcher, 1)
    config.check_gpus(cfg, "local", 0)  # the driver's own device: checked where it trains
    auto = config.load(write(tmp_path, CFG.replace("device: cpu", "device: auto")))
    config.check_gpus(auto, launcher, 0)


def test_device_auto_on_a_gpu_machine_without_gpus_per_run_says_so(tmp_path):
    """``device: auto`` through ``--launcher processes`` with ``--gpus-per-run 0`` on a machine
    with GPUs: one notice that the runs train on the CPU (before: not a word)."""
    from plugdrop.ablate import config

    auto = config.load(write(tmp_path, CFG.replace("device: cpu", "device: auto")))
    notice = config.gpus_left_idle(auto, "processes", 0, 2)
    assert notice is not None and "this machine has 2 GPUs" in notice
    assert "the runs train on the CPU (leave --gpus-per-run out" in notice
    assert config.gpus_left_idle(auto, "processes", 1, 2) is None
    assert config.gpus_left_idle(auto, "processes", 0, 0) is None
    assert config.gpus_left_idle(auto, "submitit", 0, 2) is None  # its jobs run elsewhere
    cpu = config.load(write(tmp_path, CFG))
    assert config.gpus_left_idle(cpu, "processes", 0, 2) is None

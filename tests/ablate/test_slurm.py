"""End to end against a real Slurm scheduler: a single-node cluster of Debian's packages on this
machine (:mod:`_slurm`), started once for the module; every test skips where it cannot start
(not root, Slurm not installed, the daemons not up within 30 s).

What Slurm does to a job, as these tests see it: ``scontrol requeue`` sends SIGCONT and
SIGTERM to the batch script and its steps, SIGKILL ``KillWait`` seconds later, and starts the
job again (``SLURM_RESTART_COUNT`` 1) once the requeue delay (``cred_expire``) has passed; a
time limit with ``--signal=USR2@N`` sends SIGUSR2 to the job's steps (not to the batch script)
at slurmctld's next time-limit check, made about every 30 s, whatever N; ``--time`` is counted in
whole minutes. Then ``plugdrop ablate --launcher submitit`` runs its jobs through the real
``sbatch``/``srun`` and ends with the results of an unlaunched run."""

from __future__ import annotations

import csv
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _runner_helpers import (  # noqa: F401 (reference: a fixture)
    SMALL, Driver, cli, env, popen, reference, reference_ablation, write)
from _slurm import CRED_EXPIRE, SlurmCluster, slurm_cluster, start_cluster  # noqa: F401

TIMING = {"epoch_time", "images_per_s"}


def rows(out: Path) -> list[dict[str, str]]:
    """results.csv without the timing columns (the only ones that may differ)."""
    return [{k: v for k, v in r.items() if k not in TIMING}
            for r in csv.DictReader((out / "results.csv").open())]


def script(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "job.sh"
    p.write_text("#!/bin/bash\nLOG=$1\nN=${SLURM_RESTART_COUNT:-0}\n" + body)
    p.chmod(0o755)
    return p


def wait_for_line(path: Path, line: str, cluster: SlurmCluster, timeout: float = 60) -> None:
    t0 = time.monotonic()
    while line not in (path.read_text().splitlines() if path.exists() else []):
        assert time.monotonic() - t0 < timeout, cluster.tail()
        time.sleep(0.05)


@pytest.mark.slow
def test_a_batch_job_runs_and_leaves_the_queue(slurm_cluster, tmp_path):
    c = slurm_cluster
    out = tmp_path / "out.txt"
    job = c.sbatch("-o", str(out), "--wrap", "echo job $SLURM_JOB_ID on $SLURMD_NODENAME")
    c.wait_empty(60)
    assert c.state(job) == "COMPLETED"
    assert out.read_text() == f"job {job} on {c.node}\n"
    assert c.queue() == []
    # our sacct (no slurmdbd here) answers as submitit reads it
    acct = c.run("sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", job)
    assert acct.stdout.splitlines() == ["JobID|State|NodeList", f"{job}|COMPLETED|{c.node}"]


@pytest.mark.slow
def test_scontrol_requeue_terminates_the_job_and_runs_it_again(slurm_cluster, tmp_path):
    c = slurm_cluster
    log = tmp_path / "log"
    job = c.sbatch("-o", str(tmp_path / "out"), str(script(tmp_path, """\
for s in CONT TERM USR2; do trap "echo $s $N >> $LOG; [ $s = TERM ] && exit 0" $s; done
echo start $N >> $LOG
if [ $N = 0 ]; then while true; do sleep 0.1 & wait $!; done; fi
echo end $N >> $LOG
""")), str(log))
    wait_for_line(log, "start 0", c)
    t0 = time.monotonic()
    assert c.run("scontrol", "requeue", job).returncode == 0
    c.wait_state(job, "COMPLETED", timeout=60 + CRED_EXPIRE)
    again = time.monotonic() - t0
    lines = log.read_text().splitlines()
    assert lines[0] == "start 0" and lines[-2:] == ["start 1", "end 1"], lines
    # Slurm sends SIGCONT and SIGTERM together (SIGKILL KillWait s later); bash may run the
    # TERM trap, which exits, before the CONT one: only TERM is certain to be logged
    assert "TERM 0" in lines[1:-2] and set(lines[1:-2]) <= {"CONT 0", "TERM 0"}, lines
    assert c.job(job)["Restarts"] == "1"
    # Slurm holds a requeued job back until its credential expires (cred_expire)
    assert CRED_EXPIRE <= again < CRED_EXPIRE + 30, again
    c.wait_empty(30)


def _time_limit_job(c: SlurmCluster, folder: Path) -> tuple[str, Path]:
    """A job whose step (a bash loop) logs when SIGUSR2 reaches it, submitted with
    ``--time=1 --signal=USR2@60``: what ``--signal-lead`` asks of sbatch. (It waits for
    slurmctld's next time-limit check, up to 30 s: a test that waits anyway runs it beside.)"""
    folder.mkdir()
    # a limit is whole minutes: 30 s becomes 1 min
    held = c.sbatch("--hold", "--time=0:30", "--wrap", "true")
    assert c.job(held)["TimeLimit"] == "00:01:00"
    c.run("scancel", held)
    log = folder / "log"
    step = folder / "step.sh"
    step.write_text("""\
#!/bin/bash
trap 'echo "$EPOCHREALTIME USR2" >> $1; exit 0' USR2
echo "$EPOCHREALTIME start" >> $1
while true; do sleep 0.1 & wait $!; done
""")
    step.chmod(0o755)
    job = c.sbatch("--time=1", "--signal=USR2@60", "-o", str(folder / "out"),
                   str(script(folder, f"""\
trap 'echo "$EPOCHREALTIME batch USR2" >> $LOG' USR2
srun {step} $LOG
echo "$EPOCHREALTIME end" >> $LOG
""")), str(log))
    return job, log


def _time_limit_signal_reached_the_step(c: SlurmCluster, job: str, log: Path) -> None:
    """``--signal=USR2@N`` sent SIGUSR2 to the job's steps (``srun``'s processes: where
    submitit runs a job), not to the batch script, at slurmctld's next time-limit check."""
    c.wait_state(job, "COMPLETED", "TIMEOUT", "FAILED", timeout=120)
    lines = [x.split(maxsplit=1) for x in log.read_text().splitlines()]
    assert [x[1] for x in lines] == ["start", "USR2", "end"], lines
    delay = float(lines[1][0]) - float(lines[0][0])
    print(f"SIGUSR2 {delay:.1f} s after the step started (time limit 60 s)")
    assert 0 < delay < 55  # slurmctld checks the limits every ~30 s
    assert c.state(job) == "COMPLETED"


@pytest.mark.slow
def test_the_ablation_runner_through_submitit_on_slurm(slurm_cluster, tmp_path, reference):
    pytest.importorskip("submitit", reason="the submitit extra is not installed")
    c = slurm_cluster
    out = tmp_path / "out"
    run_env = dict(c.env, **{k: v for k, v in env().items()
                             if k in ("PYTHONPATH", "OMP_NUM_THREADS")})
    driver = popen("ablate", str(write(tmp_path, SMALL)), "--out", str(out), "--launcher",
                   "submitit", "--slurm-cluster", "slurm", "--slurm-partition", c.partition,
                   "--timeout-min", "10", env=run_env)
    try:
        ref = reference(SMALL)  # meanwhile, in this process (or another test's, shared)
        printed, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, err[-3000:] + c.tail()
    assert "2 runs to train through submitit" in printed
    assert rows(out) == rows(ref)
    # the runs were a Slurm array job of two tasks, run by srun on this node
    sub = out / ".submitit"
    (script_file,) = sub.glob("*/*_submission.sh")
    text = script_file.read_text()
    assert "#SBATCH --array=0-1%2" in text and f"#SBATCH --partition={c.partition}" in text
    assert "#SBATCH --time=10" in text and "srun " in text
    array = script_file.parent.name
    tasks = sorted(p.name for p in sub.iterdir() if p.is_dir() and p.name != array)
    assert tasks == [f"{array}_0", f"{array}_1"]
    for task in ("0", "1"):
        log = "".join(p.read_text() for p in (sub / f"{array}_{task}").glob("*_log.*"))
        assert f"job_id={array}_{task}, hostname=" in log and "Job completed successfully" in log
    c.wait_empty(60)
    # what submitit's watcher reads from our sacct, for an array job
    acct = c.run("sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", array)
    assert sorted(acct.stdout.splitlines()[1:]) == [f"{array}_{t}|COMPLETED|{c.node}" for t in "01"]


@pytest.mark.slow
def test_a_training_program_through_submitit_on_slurm(slurm_cluster, tmp_path, monkeypatch):
    """``program:`` (a script of the user's, here the standard library's only) runs as
    Slurm's jobs: each job starts the program in the folder ``plugdrop ablate`` started in,
    under the run contract, and the ablation ends as the local launcher's does."""
    pytest.importorskip("submitit", reason="the submitit extra is not installed")
    from _programs import ablate, config, fake, folder, run_dir, starts

    c = slurm_cluster
    variants = '  baseline: []\n  good:\n    - {layers: "layer1.*", transform: Dropout, p: 0.1}\n'
    folder(tmp_path, monkeypatch, config(fake(), variants=variants))
    for k, v in dict(c.env, **{k: v for k, v in env().items()
                               if k in ("PYTHONPATH", "OMP_NUM_THREADS")}).items():
        monkeypatch.setenv(k, v)
    assert ablate("--launcher", "submitit", "--slurm-cluster", "slurm", "--slurm-partition",
                  c.partition, "--timeout-min", "10") == 0, c.tail()
    out = tmp_path / "out"
    for run, variant in (("baseline__s0", "baseline"), ("good__s0", "good")):
        assert (run_dir(out, run) / "done.json").exists()
        (start,) = starts(out, run)
        assert start["cwd"] == str(tmp_path) and start["env"]["PLUGDROP_VARIANT"] == variant
    assert "srun " in next((out / ".submitit").glob("*/*_submission.sh")).read_text()
    c.wait_empty(60)


# --------------------------------------------------------------------------- preemption

#: one run of 22 optimizer steps an epoch, a checkpoint every 5 steps
LONG = """\
model: tinynet:make
data: digits
image_size: 8
epochs: {epochs}
batch_size: 64
seeds: [0]
device: cpu
gradcam: false
plots: false
checkpoint_every: 5steps
variants:
  baseline: []
"""
EPOCHS = 20  # long enough to be stopped three times before it ends


def _attempts(out: Path) -> list[dict]:
    import json

    path = out / "runs" / "baseline__s0" / "attempts.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _mid_epoch_checkpoint(out: Path, driver: subprocess.Popen | Driver, c: SlurmCluster,
                          after: int = 0, timeout: float = 120) -> int:
    """Wait for a checkpoint taken in the middle of an epoch at a step past ``after``;
    returns its step."""
    import torch

    path = out / "runs" / "baseline__s0" / "checkpoint.pt"
    t0 = time.monotonic()
    while True:
        assert driver.poll() is None, driver.communicate()[1][-3000:] + c.tail()
        assert time.monotonic() - t0 < timeout, c.tail()
        try:
            state = torch.load(path, weights_only=True)
            if state["position"] is not None and int(state["step"]) > after:
                return int(state["step"])
        except Exception:  # noqa: BLE001 - not there yet, or being replaced
            pass
        time.sleep(0.05)


def _drive(c: SlurmCluster, tmp_path: Path, epochs: int, *extra: str
           ) -> tuple[Driver | subprocess.Popen, Path, Path]:
    cfg = write(tmp_path, LONG.format(epochs=epochs))
    out = tmp_path / "out"
    run_env = dict(c.env, **{k: v for k, v in env().items()
                             if k in ("PYTHONPATH", "OMP_NUM_THREADS")})
    driver = popen("ablate", str(cfg), "--out", str(out), "--launcher", "submitit",
                   "--slurm-cluster", "slurm", "--slurm-partition", c.partition, *extra,
                   env=run_env)
    return driver, out, cfg


def _job_ids(out: Path) -> list[str]:
    """The ids of the jobs submitted so far (their folders in ``.submitit``)."""
    return [p.name for p in (out / ".submitit").iterdir() if p.is_dir()]


def _next_attempt(out: Path, driver: subprocess.Popen | Driver, c: SlurmCluster, n: int,
                  timeout: float = 120) -> dict:
    """Wait for the run's attempt ``n`` (1-based) to start; returns its record."""
    t0 = time.monotonic()
    while len(_attempts(out)) < n:
        assert driver.poll() is None, driver.communicate()[1][-3000:] + c.tail()
        assert time.monotonic() - t0 < timeout, c.tail()
        time.sleep(0.1)
    return _attempts(out)[n - 1]


@pytest.mark.slow
def test_a_run_stopped_each_way_slurm_stops_a_job_resumes_at_its_step(slurm_cluster, tmp_path):
    """One run of ``--launcher submitit``, stopped in the middle of an epoch three times:

    1. ``scancel --signal=KILL``: the job ends, and the driver submits it again;
    2. SIGUSR2 to the job's step (what Slurm sends ``--signal-lead`` seconds before the time
       limit, as the job beside shows): submitit's handler checkpoints the run and requeues
       the job itself;
    3. ``scontrol requeue`` (what a preemption does): SIGTERM, the run checkpoints at its next
       step, and Slurm requeues the job.

    Each new attempt resumes at the step its predecessor checkpointed, the run ends with the
    metrics of an uninterrupted one, and the driver leaves no job behind. (The kill comes
    first: submitit's watcher looks at a young job every few seconds, at an older one once a
    minute.) Meanwhile, a job of its own shows where SIGUSR2 goes at a time limit
    (:func:`_time_limit_job`)."""
    pytest.importorskip("submitit", reason="the submitit extra is not installed")
    c = slurm_cluster
    limit = _time_limit_job(c, tmp_path / "limit")
    driver, out, _ = _drive(c, tmp_path, EPOCHS, "--timeout-min", "30", "--signal-lead", "50")
    try:
        seen = _mid_epoch_checkpoint(out, driver, c)
        (first,) = _job_ids(out)
        assert c.run("scancel", "--signal=KILL", first).returncode == 0, c.tail()
        (tmp_path / "ref").mkdir()
        ref = reference_ablation(tmp_path / "ref", LONG.format(epochs=EPOCHS))  # meanwhile
        second = _next_attempt(out, driver, c, 2)
        assert second["start_step"] >= seen > 0, _attempts(out)

        seen = _mid_epoch_checkpoint(out, driver, c, after=second["start_step"])
        (job,) = set(_job_ids(out)) - {first}
        assert c.run("scancel", "--signal=USR2", job).returncode == 0, c.tail()
        third = _next_attempt(out, driver, c, 3)
        assert third["start_step"] >= seen, _attempts(out)
        log = "".join(p.read_text() for p in (out / ".submitit" / job).glob("*_log.out"))
        assert "Caught signal SIGUSR2" in log and "Requeued job" in log, log[-3000:]

        seen = _mid_epoch_checkpoint(out, driver, c, after=third["start_step"])
        assert c.run("scontrol", "requeue", job).returncode == 0, c.tail()
        _, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, err[-3000:] + c.tail()
    assert "ended before the run did; submitting it again (1/3)" in err
    attempts = _attempts(out)
    assert len(attempts) == 4 and attempts[0]["start_step"] == 0, attempts
    assert attempts[3]["start_step"] >= seen, attempts
    assert rows(out) == rows(ref)
    text = (out / ".submitit" / job / f"{job}_submission.sh").read_text()
    assert "#SBATCH --signal=USR2@50" in text and "#SBATCH --time=30" in text, text
    _time_limit_signal_reached_the_step(c, *limit)
    assert _left_behind(c, out) == {}
    c.wait_empty(60)


def _left_behind(c: SlurmCluster, out: Path) -> dict[str, str]:
    """The jobs still queued that the driver should have cancelled: pending, or running since
    after the run finished (the job that finished it may still be ending when the driver
    exits: it started before, and Slurm shows it running or completing a moment longer)."""
    import datetime

    done = (out / "runs" / "baseline__s0" / "done.json").stat().st_mtime
    left = {}
    for j in c.queue():
        job = c.job(j)
        state, start = job.get("JobState", ""), job.get("StartTime", "")
        if state in ("COMPLETING", "COMPLETED", ""):
            continue
        started = datetime.datetime.fromisoformat(start).timestamp() if start[:1].isdigit() \
            else float("inf")
        if state != "RUNNING" or started > done + 1:
            left[j] = f"{state} since {start}"
    return left


@pytest.mark.slow
def test_a_second_cluster_starts_beside_and_leaves_no_process(slurm_cluster, tmp_path):
    with start_cluster() as other:
        assert other.conf != slurm_cluster.conf
        out = tmp_path / "out.txt"
        other.sbatch("-o", str(out), "--wrap", "echo other")
        other.wait_empty(60)
        assert out.read_text() == "other\n"
        pids = dict(other.pids)
        root = other.root
    for name, pid in pids.items():
        assert not Path(f"/proc/{pid}").exists(), f"{name} ({pid}) still runs"
    assert not root.exists()
    assert slurm_cluster.run("sinfo", "-h", "-p", "main", "-o", "%t").stdout.split() == ["idle"]


@pytest.mark.slow
def test_a_submission_sbatch_refuses_is_one_line(tmp_path):
    """Without the fixture (any machine): an ``sbatch`` that refuses (here a stand-in that
    says what a real one says for a bad partition) makes one line with sbatch's reason and
    what to check, exit status 2, no traceback and none of submitit's own printing."""
    pytest.importorskip("submitit", reason="the submitit extra is not installed")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    fake = bin_ / "sbatch"
    fake.write_text("#!/bin/sh\necho 'sbatch: error: Batch job submission failed: Invalid "
                    "partition name specified' >&2\nexit 1\n")
    fake.chmod(0o755)
    (bin_ / "srun").symlink_to(fake)  # submitit's Slurm executor looks for srun too
    run_env = dict(env(), PATH=f"{bin_}:{env()['PATH']}")
    done = cli("ablate", str(write(tmp_path, SMALL)), "--out", str(tmp_path / "out"),
               "--launcher", "submitit", "--slurm-cluster", "slurm", "--slurm-partition",
               "nosuch", env=run_env)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    ours = [x for x in done.stderr.splitlines() if x.startswith("plugdrop ablate: --launcher")]
    assert ours == ["plugdrop ablate: --launcher submitit: sbatch could not submit the jobs "
                    "(sbatch: error: Batch job submission failed: Invalid partition name "
                    "specified); check that Slurm answers here (sinfo; SLURM_CONF), choose a "
                    "partition with --slurm-partition, or train on this machine with "
                    "--slurm-cluster local"], done.stderr
    assert done.stderr.count("Invalid partition name") == 1  # submitit's print is not shown


def _bin(tmp_path: Path, **commands: int) -> Path:
    """A folder of stand-in commands, each exiting with its status."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    for name, status in commands.items():
        (bin_ / name).write_text(f"#!/bin/sh\nexit {status}\n")
        (bin_ / name).chmod(0o755)
    return bin_


@pytest.mark.slow
def test_slurm_chosen_where_slurm_is_missing_is_one_line(tmp_path):
    """``--slurm-cluster slurm`` on a machine without ``sbatch``/``srun``: one line naming
    them and the way out, exit status 2, before any data is loaded (submitit's own answer is
    a ``RuntimeError`` traceback)."""
    pytest.importorskip("submitit", reason="the submitit extra is not installed")
    done = cli("ablate", str(write(tmp_path, SMALL)), "--out", str(tmp_path / "out"),
               "--launcher", "submitit", "--slurm-cluster", "slurm",
               env=dict(env(), PATH=str(_bin(tmp_path))))
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
    assert done.stderr.strip().splitlines() == [
        "plugdrop ablate: --launcher submitit --slurm-cluster slurm: Slurm's sbatch and srun "
        "are not on this machine (PATH); submit from a Slurm login node, or train on this "
        "machine with --slurm-cluster local or --launcher processes"]


def test_auto_picks_slurm_only_where_it_answers(tmp_path, monkeypatch):
    """``--slurm-cluster auto``: Slurm's commands installed but no controller answering
    (``sinfo`` fails) trains here; ``sinfo`` answering submits to Slurm."""
    pytest.importorskip("submitit", reason="the submitit extra is not installed")
    from plugdrop.ablate.errors import ConfigError
    from plugdrop.ablate.launch.submitit import slurm_cluster

    monkeypatch.setenv("PATH", str(_bin(tmp_path, sbatch=0, srun=0, sinfo=1)))
    assert slurm_cluster("auto") == "local"
    assert slurm_cluster("slurm") == "slurm" and slurm_cluster("local") == "local"
    monkeypatch.setenv("PATH", str(_bin(tmp_path, sinfo=0)))
    assert slurm_cluster("auto") == "slurm"
    (tmp_path / "bin" / "srun").unlink()
    assert slurm_cluster("auto") == "local"
    with pytest.raises(ConfigError, match=r"Slurm's srun is not on this machine"):
        slurm_cluster("slurm")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert slurm_cluster("auto") == "local"

"""submitit's local jobs started warm (:mod:`plugdrop.ablate.launch.submitit_local`): the
controller forked from the warm server, the task from the controller, and submitit's own
behaviour kept: the job's folder, log, environment and result, a requeue after SIGUSR2, a
cancel that leaves no process. (The launcher's end-to-end tests train through it:
test_launch, test_adaptive, test_program_launchers, search/test_search_launchers.)"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from plugdrop.ablate.launch import warm

submitit = pytest.importorskip("submitit", reason="the submitit extra is not installed")

from plugdrop.ablate.launch import submitit_local  # noqa: E402 (needs submitit)
from plugdrop.ablate.launch.options import LaunchOptions  # noqa: E402
from plugdrop.ablate.launch.submitit import SubmititLauncher  # noqa: E402

HERE = Path(__file__).resolve().parent

pytestmark = [
    pytest.mark.slow,  # the server imports torch and timm once: seconds of CPU
    pytest.mark.skipif(not warm.enabled(), reason="no forkserver on this platform"),
]


@pytest.fixture
def executor(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(HERE))  # the jobs import _warm_probe
    monkeypatch.chdir(tmp_path)
    ex = submitit_local.WarmLocalExecutor(folder=tmp_path / "jobs" / "%j")
    ex.update_parameters(timeout_min=60, tasks_per_node=1, nodes=1)  # not timed out
    return ex


def _gone(pid: int, timeout: float = 30) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_task_command_is_read_as_submitit_writes_it():
    py = sys.executable
    assert warm.module_command([py, "-u", "-m", "submitit.core._submit", "/f"]) == (
        "submitit.core._submit", ["/f"], True)
    assert warm.module_command([py, "-m", "m", "a", "b"]) == ("m", ["a", "b"], False)
    for other in ([], ["/usr/bin/python3", "-m", "m"], [py, "script.py"], [py, "-u", "-c", "x"],
                  [py, "-m"]):
        assert warm.module_command(other) is None  # started as submitit starts it


def test_a_warm_job_runs_as_submitit_runs_it(executor, tmp_path):
    import _warm_probe

    job = executor.submit(_warm_probe.seen)
    got = job.result()
    # forked, not `python -u -m submitit.core._submit`: the interpreter had imported timm
    assert got["warm"] and "submitit.core._submit" not in " ".join(got["cmdline"])
    assert got["job_id"] == job.job_id and got["ppid"] == int(job.job_id)  # its controller's
    assert got["pgid"] == os.getpgid(0)  # the driver's process group, as submitit's jobs
    assert got["cuda"] == "" and got["cwd"] == str(tmp_path) and got["log"]
    assert got["sigterm"] != str(submitit_local.WarmController._forward_signal)  # reset
    assert job.state == "FINISHED"
    assert "a line of the job" in job.stdout()
    assert "Job completed successfully" in job.stdout()  # submitit's own log lines


def test_a_preempted_warm_job_is_requeued_by_its_controller(executor, tmp_path):
    import _warm_probe

    job = executor.submit(_warm_probe.preempted_once, str(tmp_path / "once"))
    assert job.result() == "second start"
    log = job.stdout()
    assert "Caught signal SIGUSR2" in log and "Requeued job" in log, log[-2000:]


def test_a_cancelled_warm_job_leaves_no_process(executor, tmp_path):
    import _warm_probe

    marker = tmp_path / "pid"
    job = executor.submit(_warm_probe.seen, str(marker))
    t0 = time.monotonic()
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() - t0 < 60, job.stderr()
        time.sleep(0.05)
    task = int(marker.read_text())
    assert "a line of the job" in job.stdout()  # python -u: not held in a buffer
    job.cancel()
    assert _gone(task) and _gone(int(job.job_id))
    assert job.state == "INTERRUPTED" or job.state == "FINISHED"


def test_the_launcher_picks_the_warm_executor_unless_told_not_to(tmp_path, monkeypatch):
    launcher = SubmititLauncher(LaunchOptions(slurm_cluster="local"))
    assert isinstance(launcher.executor(tmp_path / "a"), submitit_local.WarmLocalExecutor)
    monkeypatch.setenv("PLUGDROP_WARM_START", "0")
    ex = launcher.executor(tmp_path / "b")
    assert isinstance(ex, submitit.AutoExecutor) and ex.cluster == "local"


def test_a_server_that_cannot_start_a_controller_leaves_submitits_own(executor, monkeypatch,
                                                                     capsys):
    import _warm_probe

    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(warm, "_broken", None)
    monkeypatch.setattr(warm, "spawn", refuse)
    got = executor.submit(_warm_probe.seen).result()
    assert "submitit.core._submit" in " ".join(got["cmdline"])  # a fresh interpreter
    err = capsys.readouterr().err
    assert err.count("could not start a job (OSError: [Errno 28] No space left on device)") == 1

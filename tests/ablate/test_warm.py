"""Jobs forked from the warm server of ``--launcher processes`` (:mod:`plugdrop.ablate.launch.warm`)
behave as ``python -m MODULE``: environment, working directory, module path, session, log, exit
status, signals. (The launcher's end-to-end tests train through it: test_launch, test_faults,
test_adaptive.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plugdrop.ablate.launch import warm

HERE = Path(__file__).resolve().parent

pytestmark = [
    pytest.mark.slow,  # the server imports torch and timm once: seconds of CPU
    pytest.mark.skipif(not warm.enabled(), reason="no forkserver on this platform"),
]


def _start(tmp_path: Path, *args: str, **env: str):
    log = tmp_path / "job.log"
    full = dict(os.environ, PYTHONPATH=str(HERE), PROBE="seen", **env)
    with open(log, "ab") as f:
        job = warm.start([sys.executable, "-m", "_warm_probe", *args], env=full, log=log,
                         log_file=f)
    return job, log


def _printed(log: Path) -> tuple[dict, list[str]]:
    lines = log.read_text().splitlines()
    return json.loads(lines[0]), lines[1:]


def test_a_warm_job_runs_as_python_dash_m(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    job, log = _start(tmp_path, "3", HOME="/nowhere", OMP_NUM_THREADS="2")
    assert isinstance(job, warm.WarmProcess)
    assert job.wait(timeout=120) == 3 and job.poll() == 3 and job.returncode == 3
    seen, rest = _printed(log)
    assert seen["name"] == "__main__" and seen["argv"] == [str(HERE / "_warm_probe.py"), "3"]
    assert seen["cwd"] == str(work) and seen["path"][:2] == [str(work), str(HERE)]
    assert seen["probe"] == "seen" and seen["home"] == "/nowhere"  # the job's env, not ours
    assert seen["session"] and seen["warm"]  # its own session; timm was imported already
    assert seen["threads"] == 2  # torch's threads as the job's OMP_NUM_THREADS says
    assert seen["start_method"] is None  # multiprocessing's default, as a fresh one has
    assert rest == ["to stderr"]
    assert os.environ.get("PROBE") is None  # nothing leaked into the driver


def test_a_warm_job_starts_its_own_warm_jobs_from_the_same_server(tmp_path):
    """A job that starts warm jobs itself (a driver the tests fork): they fork from the server
    that forked it, not from a second server (a fresh interpreter importing torch again)."""
    nested = tmp_path / "nested.log"
    job, log = _start(tmp_path, "nest", str(nested))
    assert job.wait(timeout=120) == 6
    outer, (inner,) = _printed(log)[0], [json.loads(x) for x in nested.read_text().splitlines()
                                         if x.startswith("{")]
    assert inner["warm"] and inner["argv"][1:] == ["5"]
    assert inner["ppid"] == outer["ppid"]  # the same server forked both


def test_a_signal_ends_a_warm_job_as_it_ends_a_process(tmp_path):
    job, log = _start(tmp_path, "0", "sleep", OMP_NUM_THREADS="1")
    deadline = time.monotonic() + 120
    while not log.exists() or not log.read_text():
        assert time.monotonic() < deadline, "the job printed nothing"
        time.sleep(0.05)
    assert job.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        job.wait(timeout=0.1)
    assert _printed(log)[0]["threads"] == 1
    job.send_signal(signal.SIGKILL)
    assert job.wait(timeout=30) == -signal.SIGKILL
    job.send_signal(signal.SIGTERM)  # ended: nothing to signal, no error


def test_torchrun_and_the_opt_out_start_fresh_interpreters(tmp_path, monkeypatch):
    log = tmp_path / "fresh.log"
    with open(log, "ab") as f:
        job = warm.start([sys.executable, "-m", "torch.distributed.run", "--help"],
                         env=dict(os.environ), log=log, log_file=f)
        assert isinstance(job, subprocess.Popen) and job.wait(timeout=120) == 0
    monkeypatch.setenv("PLUGDROP_WARM_START", "0")
    assert not warm.enabled()
    job, log = _start(tmp_path, "4")
    assert isinstance(job, subprocess.Popen) and job.wait(timeout=120) == 4
    seen, _ = _printed(log)
    assert seen["name"] == "__main__" and not seen["warm"] and seen["start_method"] is None


def test_a_script_without_a_main_guard_is_not_run_again_in_its_jobs(tmp_path):
    """A user's script that drives plugdrop with no ``if __name__ == "__main__":`` guard:
    multiprocessing would import it again in each job (and run it); the jobs never see it."""
    marker, log = tmp_path / "ran.txt", tmp_path / "job.log"
    script = tmp_path / "user_script.py"
    script.write_text(
        "import os, sys\n"
        "from pathlib import Path\n"
        f"with open({str(marker)!r}, 'a') as f:\n"
        "    f.write('ran\\n')\n"
        "from plugdrop.ablate.launch import warm\n"
        f"job = warm.spawn('_warm_probe', ['5'], env=dict(os.environ, PYTHONPATH={str(HERE)!r}),"
        f" stdout=Path({str(log)!r}))\n"
        "sys.exit(job.wait(120))\n")
    root = str(HERE.parents[1])
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=root), timeout=300)
    assert done.returncode == 5, done.stderr[-2000:] + log.read_text()
    assert marker.read_text() == "ran\n"
    assert _printed(log)[0]["warm"]


def test_the_server_leaves_its_objects_to_the_end_of_its_process(tmp_path):
    """The server ends with its driver, holding the driver's output until it is gone: it
    freezes its objects at exit (no last collection over torch's, a second or more), and is
    the first thing the server imports. A process forked from it (a job) is left alone."""
    assert warm.PRELOAD[0] == "plugdrop.ablate.launch.server_exit"
    path = HERE.parents[1] / "plugdrop" / "ablate" / "launch" / "server_exit.py"
    code = ("import atexit, gc, importlib.util, os, sys\n"
            "atexit.register(lambda: print(os.getpid() == server, gc.get_freeze_count() > 0,"
            " flush=True))\n"
            "server = os.getpid()\n"
            f"spec = importlib.util.spec_from_file_location('server_exit', {str(path)!r})\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "child = os.fork()\n"
            "if child == 0:\n"
            "    sys.exit(0)\n"
            "os.waitpid(child, 0)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["False False", "True True"]  # the job, the server


def test_a_server_that_cannot_start_falls_back_to_fresh_interpreters(tmp_path, monkeypatch,
                                                                       capsys):
    """The server failing (no room for its socket, say): one line, then fresh interpreters;
    the run is not lost to a traceback."""
    def broken(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(warm, "spawn", broken)
    monkeypatch.setattr(warm, "_broken", None)
    for code in ("6", "7"):
        job, log = _start(tmp_path, code)
        assert isinstance(job, subprocess.Popen) and job.wait(timeout=120) == int(code)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err
    assert "every job starts as a fresh interpreter instead" in err

"""``--launcher processes`` on a machine with GPUs gives each run one GPU by default, as many
runs at once as GPUs, and says so (issue 56, item 6; before: 0 GPUs unless ``--gpus-per-run``
was given, and a program passed ``--device cuda`` failed every run). The GPU count is faked:
``torch.cuda.device_count`` and ``CUDA_VISIBLE_DEVICES``, what the launcher reads."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from _runner_helpers import SMALL, write

from plugdrop.ablate import config
from plugdrop.ablate.errors import ConfigError
from plugdrop.ablate.launch import gpus_for_jobs, processes
from plugdrop.ablate.launch.options import LaunchOptions


@pytest.fixture
def gpus(monkeypatch):
    """``gpus(n)``: this machine shows ``n`` GPUs (no ``CUDA_VISIBLE_DEVICES``)."""
    def show(n: int) -> None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    return show


def started(launcher: processes.ProcessesLauncher, tmp_path: Path, monkeypatch,
            ids: list[str]) -> list[dict[str, str]]:
    """The environment of each job ``launcher`` submits for runs ``ids`` (no process
    started)."""
    envs: list[dict[str, str]] = []

    def start(rd, env, log, log_file):
        envs.append(env)
        return SimpleNamespace(pid=1000 + len(envs), poll=lambda: 0)

    monkeypatch.setattr(launcher, "_start", start)
    launcher.out = tmp_path
    (tmp_path / ".processes").mkdir(exist_ok=True)
    jobs = launcher.submit([SimpleNamespace(id=i) for i in ids])
    for job in jobs:
        job.log_file.close()
    return envs


def test_one_gpu_per_run_by_default_as_many_at_once_as_gpus(gpus, tmp_path, monkeypatch):
    gpus(2)
    launcher = processes.ProcessesLauncher(LaunchOptions())
    assert launcher.capacity() == 2
    envs = started(launcher, tmp_path, monkeypatch, ["a__s0", "b__s0"])
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1"]
    launcher.free_gpus(["1"])  # a job ended: its GPU goes to the next
    assert started(launcher, tmp_path, monkeypatch, ["c__s0"])[0]["CUDA_VISIBLE_DEVICES"] == "1"
    # the visible GPUs only, when CUDA_VISIBLE_DEVICES says which
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3, 5,6")
    launcher = processes.ProcessesLauncher(LaunchOptions(max_parallel=2))
    assert launcher.capacity() == 2
    envs = started(launcher, tmp_path, monkeypatch, ["a__s0", "b__s0"])
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["3", "5"]


def test_without_gpus_or_with_gpus_per_run_as_before(gpus, tmp_path, monkeypatch):
    gpus(0)
    launcher = processes.ProcessesLauncher(LaunchOptions(cpus_per_run=1))
    assert launcher.each == 0 and launcher.capacity() == max(1, os.cpu_count() or 1)
    assert started(launcher, tmp_path, monkeypatch, ["a__s0"])[0]["CUDA_VISIBLE_DEVICES"] == ""
    gpus(4)
    zero = processes.ProcessesLauncher(LaunchOptions(gpus_per_run=0, cpus_per_run=1))
    assert zero.each == 0 and zero.capacity() == launcher.capacity()
    two = processes.ProcessesLauncher(LaunchOptions(gpus_per_run=2))
    assert two.capacity() == 2
    envs = started(two, tmp_path, monkeypatch, ["a__s0", "b__s0"])
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", "2,3"]


def test_the_default_is_said_in_one_line(gpus, tmp_path):
    cuda = config.load(write(tmp_path, SMALL.replace("device: cpu", "device: cuda")))
    auto = config.load(write(tmp_path, SMALL.replace("device: cpu", "device: auto")))
    gpus(2)
    line = gpus_for_jobs(cuda, "processes", LaunchOptions())
    assert line is not None and "\n" not in line
    assert "each run gets one of this machine's 2 GPUs (2 runs at once" in line
    assert "1 run at once" in gpus_for_jobs(auto, "processes", LaunchOptions(max_parallel=1))
    assert gpus_for_jobs(cuda, "processes", LaunchOptions(gpus_per_run=1)) is None
    idle = gpus_for_jobs(auto, "processes", LaunchOptions(gpus_per_run=0))
    assert "--gpus-per-run 0 GPUs: the runs train on the CPU" in idle
    with pytest.raises(ConfigError, match="cuda, but --launcher processes gives each run's "
                                          "job the GPUs of --gpus-per-run, 0 here"):
        gpus_for_jobs(cuda, "processes", LaunchOptions(gpus_per_run=0))
    gpus(0)
    assert gpus_for_jobs(auto, "processes", LaunchOptions()) is None  # as before: the CPU
    with pytest.raises(ConfigError, match="device: cuda, but this machine has no GPU for "
                                          "--launcher processes to give its runs"):
        gpus_for_jobs(cuda, "processes", LaunchOptions())
    # the other launchers: 0 by default, as before
    with pytest.raises(ConfigError, match="--gpus-per-run, 0 by default: add --gpus-per-run 1"):
        gpus_for_jobs(cuda, "submitit", LaunchOptions())

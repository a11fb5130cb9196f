"""Shared helpers of the runner tests: configs, running the CLI in-process or as a subprocess."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent  # tests/ (holds tinynet.py)
ROOT = TESTS.parent

GOOD = """\
model: tinynet:make
data: digits
image_size: 8
epochs: 1
batch_size: 128
seeds: [0, 1]
variants:
  baseline: []
  dropblock:
    - {layers: "layer1.*", transform: DropBlock, p: 0.1, block_size: 3}
  ramp:
    - {layers: "layer1.0", transform: DropBlock, block_size: 2,
       p: {schedule: linear, start: 0.0, end: 0.2}}
    - {layers: "layer2.*", transform: Dropout2d, p: {schedule: cosine, start: 0.0, end: 0.1}}
    - {layers: fc, transform: ClipGradNorm, max_norm: 1.0, where: params}
"""

SMALL = """\
model: tinynet:make
data: digits
image_size: 8
epochs: 2
batch_size: 128
seeds: [0]
device: cpu
gradcam: false
variants:
  baseline: []
  dropblock:
    - {layers: "layer1.*", transform: DropBlock, p: 0.1, block_size: 3}
"""


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS),
                                                        os.environ.get("PYTHONPATH", "")]),
                OMP_NUM_THREADS="1")


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    """``python -m plugdrop ARGS`` in a subprocess."""
    return subprocess.run([sys.executable, "-m", "plugdrop", *args], capture_output=True,
                          text=True, env=env(), timeout=kw.pop("timeout", 300), **kw)


def popen(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "plugdrop", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env())


def reference_ablation(tmp: Path, text: str) -> Path:
    """Train the config ``text`` in this process on one torch thread (as every launcher's job
    and the subprocesses run: the same float summation order); returns its ``--out``."""
    import torch

    from plugdrop.cli import main

    out = tmp / "out"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["ablate", str(write(tmp, text)), "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> Callable[[str], Path]:
    """``reference(text)``: the ``--out`` of the config ``text`` trained by
    :func:`reference_ablation`, once per test session (across pytest-xdist's workers too: the
    first to ask trains it under a file lock, the others wait and read it). Tests compare
    with it or copy it; none writes into it."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base

    def get(text: str) -> Path:
        key = hashlib.sha256(text.encode()).hexdigest()[:12]
        home = shared / f"reference-{key}"
        with FileLock(str(shared / f"reference-{key}.lock")):
            if not (home / "trained").exists():
                shutil.rmtree(home, ignore_errors=True)  # a worker that died half-way
                home.mkdir()
                reference_ablation(home, text)
                (home / "trained").touch()
        return home / "out"

    return get


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster on this machine's 2 CPUs (jobs import the worktree and tinynet);
    skips where the ray extra is missing or a cluster cannot start. (A module imports it to
    use it: a second ``conftest.py`` would shadow the suite's, which tests import by name.)"""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    old = {k: os.environ.get(k) for k in ("PYTHONPATH", "OMP_NUM_THREADS")}
    os.environ.update({k: v for k, v in env().items() if k in old})
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    except Exception as e:  # pragma: no cover - depends on the machine
        pytest.skip(f"a local Ray cluster cannot start here: {type(e).__name__}: {e}")
    try:
        yield ray
    finally:
        ray.shutdown()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

"""Shared helpers of the runner tests: configs, running the CLI in-process or as a subprocess."""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from _processes import warm as _warm

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
plots: false
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
plots: false
"""


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS),
                                                        os.environ.get("PYTHONPATH", "")]),
                OMP_NUM_THREADS="1")


_env = env


# The drivers these tests start are forked from the warm server of --launcher processes
# (_processes.warm), which then also holds what a driver imports: a driver starts in a fraction
# of a second, not the ~10 s of CPU a fresh interpreter spends importing torch, timm, scipy and
# matplotlib. (test_wheel, test_architecture and the docs start fresh ones.)
_OUTPUT = Path(tempfile.mkdtemp(prefix="plugdrop-tests-"))
atexit.register(shutil.rmtree, _OUTPUT, True)


class Driver:
    """``python -m plugdrop ARGS`` forked from the warm server: the calls of a text-mode
    :class:`subprocess.Popen` with piped stdout and stderr that the tests make (``stdout`` and
    ``stderr`` read the output so far; :meth:`communicate` what is left)."""

    _count = 0

    def __init__(self, warm, args: list[str], env: dict[str, str], cwd: Path | None = None,
                 module: str = "plugdrop", merged: bool = False) -> None:
        Driver._count += 1
        base = _OUTPUT / f"{os.getpid()}-{Driver._count}"
        out, err = base.with_suffix(".out"), base.with_suffix(".err")
        err = out if merged else err
        out.touch()
        err.touch()
        self.args = [sys.executable, "-m", module, *args]
        self._job = warm.spawn(module, args, env=env, stdout=out, stderr=err, cwd=cwd)
        self.pid = self._job.pid
        self.stdout = out.open(errors="replace")
        self.stderr = None if merged else err.open(errors="replace")

    @property
    def returncode(self) -> int | None:
        return self._job.poll()

    def poll(self) -> int | None:
        return self._job.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._job.wait(timeout)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self._job.wait(timeout)
        out, err = self.stdout.read(), self.stderr.read() if self.stderr else None
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        return out, err  # type: ignore[return-value]

    def send_signal(self, signum: int) -> None:
        self._job.send_signal(signum)

    def terminate(self) -> None:
        self._job.terminate()

    def kill(self) -> None:
        self._job.kill()


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 300, module: str = "plugdrop") -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` (default: ``plugdrop``) run to its end in a process of its
    own (forked warm where it can be), as :func:`subprocess.run` with ``capture_output``."""
    proc = popen(*args, env=env, cwd=cwd, module=module)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, int(proc.returncode or 0), out, err)


def popen(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
          module: str = "plugdrop", merged: bool = False) -> Driver | subprocess.Popen:
    """``python -m MODULE ARGS`` (default: ``plugdrop``) started in a session of its own
    (``env``: default :func:`env`), stdout and stderr piped (``merged``: stderr into stdout):
    forked from the warm server where the platform has one, else a fresh interpreter."""
    env = _env() if env is None else env
    warm = _warm()
    if warm is not None:
        return Driver(warm, list(args), env, cwd, module, merged)
    return subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True,
                            env=env, cwd=cwd, start_new_session=True)


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


def once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder ``build(folder)`` fills once per test session, across pytest-xdist's workers
    too (the first to ask builds it under a file lock, the others wait and read it); ``name``
    tells one from another. Tests compare with it or copy it; none writes into it."""
    from filelock import FileLock

    base = factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    home = shared / name
    with FileLock(str(shared / f"{name}.lock")):
        if not (home / "built").exists():
            shutil.rmtree(home, ignore_errors=True)  # a worker that died half-way
            home.mkdir()
            build(home)
            (home / "built").touch()
    return home


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> Callable[[str], Path]:
    """``reference(text)``: the ``--out`` of the config ``text`` trained by
    :func:`reference_ablation`, once per test session (:func:`once`)."""

    def get(text: str) -> Path:
        key = hashlib.sha256(text.encode()).hexdigest()[:12]
        return once(tmp_path_factory, f"reference-{key}",
                    lambda home: reference_ablation(home, text)) / "out"

    return get


_RAY: list = []  # the cluster this process started: one for all its tests


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster on this machine's 2 CPUs (jobs import the worktree and tinynet),
    started once per test process and shut down when it exits (Ray's workers stay warm between
    modules); skips where the ray extra is missing or a cluster cannot start. (A module imports
    it to use it: a second ``conftest.py`` would shadow the suite's, which tests import by
    name.)"""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    if not _RAY:
        old = {k: os.environ.get(k) for k in ("PYTHONPATH", "OMP_NUM_THREADS")}
        os.environ.update({k: v for k, v in env().items() if k in old})
        try:  # the cluster's processes take the environment now; ours is restored after
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        except Exception as e:  # pragma: no cover - depends on the machine
            pytest.skip(f"a local Ray cluster cannot start here: {type(e).__name__}: {e}")
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        _RAY.append(ray)
        atexit.register(ray.shutdown)
    yield ray

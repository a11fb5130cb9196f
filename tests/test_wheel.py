"""plugdrop as a user installs it: an sdist and a wheel built from a copy of the source tree
(setuptools' PEP 517 hooks, offline), holding the kernel's C source, the type marker and the
``plugdrop`` command; the wheel installed into a folder of its own and used from a directory
outside the repository, with nothing of the repository on the path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import plugdrop as pd

#: builds and installs a wheel and an sdist
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
TOP = {".git", ".venv", "build", "dist", "plugdrop.egg-info", "runs", "site", ".hypothesis",
       "tests", "benchmarks", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".benchmarks"}


def SKIP(folder: str, names: list[str]) -> set[str]:
    """What a checkout holds besides the source: the environment, caches, outputs (at the top
    only: ``plugdrop/ablate/runs`` is source)."""
    top = Path(folder) == ROOT
    return {n for n in names if (top and n in TOP) or n == "__pycache__"}

USE = """\
import sys, torch, torch.nn as nn
import plugdrop as pd
assert pd.__file__.startswith(sys.argv[1]), pd.__file__
torch.manual_seed(0)
m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))
h = pd.attach(m, "1", pd.DropBlock(0.3, block_size=3))
x = torch.randn(4, 3, 16, 16)
m.train()
loss = m(x).sum()
loss.backward()
assert m[0].weight.grad is not None
m.eval()
with torch.no_grad():
    a = m(x)
h.remove()
with torch.no_grad():
    assert torch.equal(a, m(x))  # eval mode: exactly the bare model
print(pd.__version__, pd.kernel_info() if hasattr(pd, "kernel_info") else "")
"""


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=SKIP)
    out = tmp / "dist"
    hooks = ("from setuptools import build_meta as b; import sys; d = sys.argv[1]; "
             "b.build_sdist(d); b.build_wheel(d)")  # (the hooks rewrite sys.argv)
    done = subprocess.run([sys.executable, "-c", hooks, str(out)], cwd=src, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_the_sdist_and_the_wheel_hold_the_kernel_source_and_the_command(dist):
    (wheel,) = dist.glob(f"plugdrop-{pd.__version__}-py3-none-any.whl")
    (sdist,) = dist.glob(f"plugdrop-{pd.__version__}.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"plugdrop/__init__.py", "plugdrop/py.typed", "plugdrop/_kernels/_csrc/blockdrop.c",
            "plugdrop/_kernels/_csrc/pycall.c", "plugdrop/ablate/runs/checkpoints.py"} <= names
    info = f"plugdrop-{pd.__version__}.dist-info"
    entry = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert "plugdrop = plugdrop.cli:entry" in entry
    meta = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    for extra in ("cli", "slurm", "ray", "dev"):
        assert f"Provides-Extra: {extra}" in meta
    members = {m.split("/", 1)[1] for m in tarfile.open(sdist).getnames() if "/" in m}
    assert {"pyproject.toml", "README.md", "plugdrop/_kernels/_csrc/blockdrop.c",
            "plugdrop/_kernels/_csrc/pycall.c"} <= members


def test_the_installed_wheel_works_without_the_repository(dist, tmp_path):
    (wheel,) = dist.glob("*.whl")
    target = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                           "--target", str(target), str(wheel)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(target), PLUGDROP_CACHE_DIR=str(tmp_path / "cache"))
    ran = subprocess.run([sys.executable, "-c", USE, str(target)], cwd=away, env=env,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.startswith(pd.__version__)

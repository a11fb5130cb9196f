"""Fixtures the runner's test modules share."""

from __future__ import annotations

import os

import pytest
from _runner_helpers import env


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster on this machine's 2 CPUs (jobs import the worktree and tinynet);
    skips where the ray extra is missing or a cluster cannot start."""
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

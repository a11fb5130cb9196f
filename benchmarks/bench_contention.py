"""The same calls while two other processes keep every core busy (DataLoader workers, other
jobs): plugdrop against its own torch-op path (the fused C kernel switched off) and against a
plain ``x * x`` under the same load, interleaved in one process. OpenMP threads that spin or
oversubscribe would show here as a ratio far above the idle machine's."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from plugdrop._kernels import autograd as KA
from _harness import interleaved, record

P = 0.1
BUSY = "import time\nend = time.time() + 600\nwhile time.time() < end:\n    pass\n"


@pytest.fixture(scope="module")
def busy_cores():
    """Two processes spinning on the CPU for the duration of this module."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        yield len(procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _torch_ops(f):
    """``f`` run with the fused C kernel switched off (plugdrop's torch-op path)."""
    def run():
        KA.USE_CEXT = False
        try:
            return f()
        finally:
            KA.USE_CEXT = True
    return run


CASES = {
    "DropBlock": lambda: pd.DropBlock(P, block_size=3),
    "DropBlock-shared": lambda: pd.DropBlock(P, block_size=3, shared_channels=True),
    "Dropout2d": lambda: pd.Dropout2d(P),
    "DropPath": lambda: pd.DropPath(P),
    "GaussianNoise": lambda: pd.GaussianNoise(P),
}


@pytest.mark.parametrize("shape", [(2, 8, 7, 7), (8, 64, 28, 28), (32, 512, 14, 14)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(CASES))
def test_under_contention(benchmark, busy_cores, name, shape):
    x = torch.randn(shape)
    m = nn.Sequential(nn.Identity()).train()
    pd.attach(m, "0", CASES[name]())
    fns = {"plugdrop": lambda: m(x), "torch-op path": _torch_ops(lambda: m(x)),
           "x*x": lambda: x * x}
    with torch.no_grad():
        med = interleaved(fns, budget_s=2.0, min_rounds=15, max_rounds=400)
    record(benchmark, f"under contention ({busy_cores} busy processes) {name} "
           f"{'x'.join(map(str, shape))}", med)
    benchmark.pedantic(fns["plugdrop"], rounds=1, iterations=1)

"""Host cost per hooked call: what an attached transform adds, forward + backward, to a model's
step above the bare module, on a tensor so small (2x4x8x8) that its kernels cost nothing: the
hook, the transform's Python path, the key draw, the autograd node and its backward, the kernel
call. On a GPU this is the time the host spends before the kernels can start, at every layer
and step; at small maps a training step is bound by it.

The reference is the price a user already accepts: torch's own ``nn.Dropout`` placed in the
same spot (after the module, in the same ``nn.Sequential``), a native op with a native backward.
Each case runs, interleaved in one process, the bare module, the module followed by
``nn.Dropout`` and the module with the transform attached to it; the ratio is plugdrop's cost
above the bare module over ``nn.Dropout``'s (at most 1: a hooked call costs no more than the
dropout a user would write). The figures are thread CPU time (``time.thread_time``): on a
shared machine, the time this process spent, not the time it waited for a core.

Run with ``./dev bench -k hostcost``.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from _harness import interleaved, record

SHAPE = (2, 4, 8, 8)
P = 0.1

CASES = {
    "DropBlock": lambda: pd.DropBlock(P, block_size=3),
    "Dropout2d": lambda: pd.Dropout2d(P),
    "DropPath": lambda: pd.DropPath(P),
    "GaussianNoise": lambda: pd.GaussianNoise(P),
}


def _step(model: nn.Module, x: torch.Tensor, g: torch.Tensor):
    """One forward + backward of ``model`` on ``x`` (its gradient cleared first)."""
    def run() -> None:
        x.grad = None
        model(x).backward(g)
    return run


def host_costs(name: str, budget_s: float = 2.0) -> dict[str, float]:
    """Median seconds of a forward + backward: ``bare`` (the module), ``nn.Dropout`` (the
    module, then torch's dropout) and ``plugdrop`` (the module with ``name`` attached)."""
    x = torch.randn(SHAPE, requires_grad=True)
    g = torch.randn(SHAPE)
    bare = nn.Sequential(nn.Identity()).train()
    dropout = nn.Sequential(nn.Identity(), nn.Dropout(P)).train()
    attached = nn.Sequential(nn.Identity()).train()
    pd.attach(attached, "0", CASES[name]())
    fns = {"plugdrop": _step(attached, x, g), "nn.Dropout": _step(dropout, x, g),
           "bare": _step(bare, x, g)}
    return interleaved(fns, budget_s=budget_s, min_rounds=500, max_rounds=20000, warmup=50,
                       clock=time.thread_time)


@pytest.mark.parametrize("name", list(CASES))
def test_host_cost_per_hooked_call(benchmark, name):
    med = host_costs(name)
    ours = med["plugdrop"] - med["bare"]
    torchs = med["nn.Dropout"] - med["bare"]
    note = (f"above the bare module: plugdrop +{ours * 1e6:.1f} us, nn.Dropout "
            f"+{torchs * 1e6:.1f} us (bare fwd+bwd {med['bare'] * 1e6:.1f} us, thread CPU time)")
    record(benchmark, f"host cost per hooked call, fwd+bwd, {name} {SHAPE}",
           {"plugdrop": ours, "nn.Dropout (above bare)": torchs}, note=note)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)

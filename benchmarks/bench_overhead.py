"""Per-call overhead of an attached transform: a tiny tensor, where the fixed cost of the hook
and the transform's Python path is all there is to measure. Baselines, interleaved in the same
process: the bare module, and the same module with a bare forward hook returning ``x * 1``;
the same op in timm, torchvision or torch called as a function (no module, no hook: the lowest
cost of the op itself), and as the module a user of those libraries puts in the model after
the module (``... in model``: the module's call, then the regularizer module's call: what
they pay per call, to set against plugdrop's module + hook).

Each is measured warm (calls back to back: the Python objects and the code they use stay in
the caches) and cold (a 32 MB write between calls, as a network's layers do between two of its
hooks: every call then fetches what it touches from memory, and a longer Python path costs
several times its warm time).

Ratios are plugdrop / baseline; the medians (microseconds) are in the record too, so a change
of the attachment layer can be compared before and after on the same machine.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import plugdrop as pd
from _harness import interleaved, record

SHAPE = (2, 8, 6, 6)


def _bare_hook(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    return output * 1


CASES = {
    "DropBlock": lambda: pd.DropBlock(0.1, block_size=3),
    "DropBlock-shared": lambda: pd.DropBlock(0.1, block_size=3, shared_channels=True),
    "Dropout2d": lambda: pd.Dropout2d(0.1),
    "DropPath": lambda: pd.DropPath(0.1),
    "Dropout": lambda: pd.Dropout(0.1),
    "GaussianNoise": lambda: pd.GaussianNoise(0.1),
    "DropBlock-scheduled": lambda: pd.DropBlock(pd.linear(0.0, 0.1, steps=100), block_size=3),
}


def _peers(name: str, module: nn.Module) -> dict:
    """The same op in timm, torchvision or torch, where it exists: called directly as a
    function (no hook), and as their module after ``module`` (``... in model``)."""
    out = {}
    try:
        timm = importlib.import_module("timm.layers.drop")
    except Exception:  # pragma: no cover - optional baseline
        timm = None
    try:
        ops = importlib.import_module("torchvision.ops")
    except Exception:  # pragma: no cover - optional baseline
        ops = None
    def then(reg: nn.Module):
        reg.train()
        return lambda x: reg(module(x))

    if name.startswith("DropBlock"):
        shared = name == "DropBlock-shared"
        # the scheduled case is measured mid-ramp (p = 0.05), with the peers at that p: the
        # same company as the constant case (a call that follows a peer's multi-threaded ops
        # pays for the worker threads they leave spinning, whatever it is)
        p = 0.05 if name == "DropBlock-scheduled" else 0.1
        if timm is not None:
            out["timm"] = lambda x: timm.drop_block_2d(x, p, 3, couple_channels=shared)
            out["timm in model"] = then(timm.DropBlock2d(p, 3, couple_channels=shared))
        if ops is not None and not shared:
            out["torchvision"] = lambda x: ops.drop_block2d(x, p, 3)
            out["torchvision in model"] = then(ops.DropBlock2d(p, 3))
    elif name == "DropPath":
        if timm is not None:
            out["timm"] = lambda x: timm.drop_path(x, 0.1, training=True)
            out["timm in model"] = then(timm.DropPath(0.1))
        if ops is not None:
            out["torchvision"] = lambda x: ops.stochastic_depth(x, 0.1, "row", training=True)
            out["torchvision in model"] = then(ops.StochasticDepth(0.1, "row"))
    elif name == "Dropout2d":
        out["torch"] = lambda x: F.dropout2d(x, 0.1, training=True)
        out["torch in model"] = then(nn.Dropout2d(0.1))
    elif name == "Dropout":
        out["torch"] = lambda x: F.dropout(x, 0.1, training=True)
        out["torch in model"] = then(nn.Dropout(0.1))
    return out


@pytest.mark.parametrize("cache", ["warm", "cold"])
@pytest.mark.parametrize("name", list(CASES))
def test_per_call_overhead(benchmark, name, cache):
    x = torch.randn(SHAPE)
    plain = nn.Identity().train()
    hooked = nn.Identity().train()
    hooked.register_forward_hook(_bare_hook)
    attached = nn.Identity().train()
    pd.attach(attached, "", CASES[name]()).step(50)  # mid-ramp for the scheduled case
    with torch.no_grad():
        fns = {"plugdrop": lambda: attached(x), "bare hook": lambda: hooked(x),
               "module": lambda: plain(x)}
        for peer, f in _peers(name, plain).items():
            fns[peer] = (lambda f=f: f(x))
        if cache == "warm":
            medians = interleaved(fns, budget_s=1.5, max_rounds=2000, min_rounds=100)
        else:
            other = torch.zeros(8 << 20)  # 32 MB
            medians = interleaved(fns, budget_s=1.5, max_rounds=200, min_rounds=60,
                                  before=lambda: other.add_(1.0))
    label = "" if cache == "warm" else ", cold (32 MB written between calls)"
    record(benchmark, f"per-call {name} {SHAPE}{label}", medians)
    benchmark.pedantic(lambda: attached(x), rounds=1, iterations=1)


def test_per_call_gradient_transform(benchmark):
    x = torch.randn(SHAPE, requires_grad=True)
    hooked = nn.Identity().train()
    hooked.register_forward_hook(_bare_hook)
    attached = nn.Identity().train()
    pd.attach(attached, "", pd.ClipGradNorm(1.0))
    g = torch.ones(SHAPE)

    def run(m: nn.Module):
        return lambda: m(x).backward(g)

    medians = interleaved({"plugdrop": run(attached), "bare hook": run(hooked)},
                          budget_s=1.5, max_rounds=500, min_rounds=20)
    record(benchmark, f"per-call ClipGradNorm fwd+bwd {SHAPE}", medians)
    benchmark.pedantic(run(attached), rounds=1, iterations=1)

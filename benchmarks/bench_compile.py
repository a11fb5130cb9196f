"""``torch.compile`` (inductor, CPU): the compiled forward of DropBlock alone against a compiled
``x * (rand >= p)`` and timm's compiled ``drop_block_2d``, and against eager plugdrop and
``x * x`` eager and compiled (what compiling a call of one pass over the tensor costs); and a
compiled training step of a small ResNet with DropBlock on its last two stages against the
compiled bare model and the same step in eager mode. ``p`` follows a schedule (a 0-dim tensor:
one graph for the whole ramp)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from _harness import interleaved, record

P = 0.1


def _attached(transform: pd.Transform) -> tuple[nn.Module, object]:
    m = nn.Sequential(nn.Identity()).train()
    return m, pd.attach(m, "0", transform)


@pytest.mark.parametrize("shape", [(16, 256, 28, 28), (32, 512, 14, 14)],
                         ids=lambda s: "x".join(map(str, s)))
def test_compiled_dropblock_forward(benchmark, shape):
    torch._dynamo.reset()
    x = torch.randn(shape)
    m, h = _attached(pd.DropBlock(pd.linear(0.0, P, steps=10), block_size=7))
    h.step(10)
    eager = copy.deepcopy(m)
    cm = torch.compile(m)
    p = torch.tensor(P)
    plain = torch.compile(lambda t: t * (torch.rand_like(t) >= p))
    # the compiled frame's own cost per call, on the same tensor: x * x compiled, against
    # x * x eager
    square = torch.compile(lambda t: t * t)
    fns = {"plugdrop compiled": lambda: cm(x), "plugdrop eager": lambda: eager(x),
           "x*(rand>=p) compiled": lambda: plain(x), "x*x": lambda: x * x,
           "x*x compiled": lambda: square(x)}
    try:
        from timm.layers.drop import drop_block_2d
        tc = torch.compile(lambda t: drop_block_2d(t, P, 7, couple_channels=False))
        fns["timm compiled"] = lambda: tc(x)
    except Exception:  # pragma: no cover - optional baseline
        pass
    with torch.no_grad():
        med = interleaved(fns, budget_s=3.0)
    record(benchmark, f"compiled DropBlock fwd (one graph for the ramp) {'x'.join(map(str, shape))}",
           med, subject="plugdrop compiled")
    benchmark.pedantic(fns["plugdrop compiled"], rounds=1, iterations=1)
    torch._dynamo.reset()


def _resnet() -> nn.Module:
    def stage(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1), nn.BatchNorm2d(cout),
                             nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1),
                             nn.BatchNorm2d(cout), nn.ReLU())
    return nn.Sequential(stage(3, 32), stage(32, 64), stage(64, 128), stage(128, 256),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10))


def test_compiled_train_step(benchmark):
    torch._dynamo.reset()
    torch.manual_seed(0)
    x, y = torch.randn(16, 3, 96, 96), torch.randint(0, 10, (16,))
    bare = _resnet().train()
    reg = copy.deepcopy(bare)
    pd.attach(reg, ["2", "3"], pd.DropBlock(pd.linear(0.0, P, steps=10), block_size=3)).step(10)
    eager = copy.deepcopy(reg)
    loss = nn.functional.cross_entropy

    def step(model: nn.Module):
        params = list(model.parameters())

        def run():
            for q in params:
                q.grad = None
            loss(model(x), y).backward()
        return run

    fns = {"plugdrop compiled": step(torch.compile(reg)), "bare compiled": step(torch.compile(bare)),
           "plugdrop eager": step(eager)}
    med = interleaved(fns, budget_s=6.0, min_rounds=5)
    record(benchmark, "compiled train step, 4-stage ResNet, batch 16, 96 px, DropBlock on stages 3-4",
           med, subject="plugdrop compiled")
    benchmark.pedantic(fns["plugdrop compiled"], rounds=1, iterations=1)
    torch._dynamo.reset()

"""A whole training step of timm resnet50 (batch 8, 128 px, CPU): plugdrop's per-channel
DropBlock on layer3.* and layer4.* against the bare model and timm's ``drop_block_rate``."""

from __future__ import annotations

import copy

import pytest
import torch

import plugdrop as pd
from _harness import interleaved, record

timm = pytest.importorskip("timm")


def _step(model, opt, x, y):
    def run():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return run


def test_resnet50_train_step(benchmark):
    torch.manual_seed(0)
    x = torch.randn(8, 3, 128, 128)
    y = torch.randint(0, 100, (8,))
    bare = timm.create_model("resnet50", pretrained=False, num_classes=100).train()
    ours = copy.deepcopy(bare)
    pd.attach(ours, "layer3.*", pd.DropBlock(0.1, block_size=5))
    pd.attach(ours, "layer4.*", pd.DropBlock(0.1, block_size=3))
    theirs = timm.create_model("resnet50", pretrained=False, num_classes=100,
                               drop_block_rate=0.1).train()
    watched = copy.deepcopy(ours)
    pd.watch(watched, ["layer3.*", "layer4.*"])  # plugdrop.watch on the regularized layers
    fns = {}
    for name, model in (("plugdrop", ours), ("no regularization", bare),
                        ("timm drop_block_rate", theirs), ("plugdrop + watch", watched)):
        opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
        fns[name] = _step(model, opt, x, y)
    med = interleaved(fns, budget_s=50.0, min_rounds=15, max_rounds=40)
    record(benchmark, "timm resnet50 train step, batch 8, 128px", med,
           note=f"plugdrop.watch on layer3.*, layer4.*: "
                f"{med['plugdrop + watch'] / med['plugdrop']:.3f}x the step without it")
    benchmark.pedantic(fns["plugdrop"], rounds=2, iterations=1)

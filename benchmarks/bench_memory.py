"""Memory autograd saves for the backward, per element of the activation, measured with
``torch.autograd.graph.saved_tensors_hooks`` (distinct storages)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from _harness import saved_bytes
from bench_transforms import _attached, _timm, _torchvision_ops

SHAPE = (32, 1024, 14, 14)
P = 0.1

TRANSFORMS = {
    "DropBlock per-channel": (lambda: pd.DropBlock(P, 7),
                              {"timm": lambda t, x: t.drop_block_2d(x, P, 7, couple_channels=False)},
                              {"torchvision": lambda o, x: o.drop_block2d(x, P, 7)}),
    "DropBlock shared": (lambda: pd.DropBlock(P, 7, shared_channels=True),
                         {"timm": lambda t, x: t.drop_block_2d(x, P, 7, couple_channels=True)}, {}),
    "DropBlock per-channel p=0.5 (dense path)": (lambda: pd.DropBlock(0.5, 3), {}, {}),
    "Dropout2d": (lambda: pd.Dropout2d(P), {}, {}),
    "DropPath": (lambda: pd.DropPath(P), {"timm": lambda t, x: t.drop_path(x, P, True)},
                 {"torchvision": lambda o, x: o.stochastic_depth(x, P, "row", True)}),
    "Dropout": (lambda: pd.Dropout(P), {}, {}),
    "GaussianNoise": (lambda: pd.GaussianNoise(0.1), {}, {}),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_saved_memory(benchmark, name):
    make, timm_fns, tv_fns = TRANSFORMS[name]
    x = torch.randn(SHAPE, requires_grad=True)
    n = x.numel()
    m = _attached(make())
    per_elem = {"plugdrop": saved_bytes(lambda: m(x)) / n}
    timm = _timm()
    for k, f in timm_fns.items():
        if timm is not None:
            per_elem[k] = saved_bytes(lambda f=f: f(timm, x)) / n
    ops = _torchvision_ops()
    for k, f in tv_fns.items():
        if ops is not None:
            per_elem[k] = saved_bytes(lambda f=f: f(ops, x)) / n
    per_elem["F.dropout (reference)"] = saved_bytes(
        lambda: nn.functional.dropout(x, P, training=True)) / n
    benchmark.extra_info["case"] = f"saved bytes/element: {name} {SHAPE}"
    benchmark.extra_info["bytes_per_element"] = per_elem
    benchmark.pedantic(lambda: m(x), rounds=1, iterations=1)

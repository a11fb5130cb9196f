"""Speed of each transform through the public attach path, against baselines run interleaved in
the same process: a plain ``x * x``, and timm's, torchvision's and the ``dropblock`` package's
implementations where they exist. Run with ``./dev bench``; ratios are plugdrop / baseline."""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import plugdrop as pd
from _harness import interleaved, record

P = 0.1
SHAPES_2D = [(32, 1024, 14, 14), (32, 2048, 7, 7), (16, 512, 28, 28), (64, 256, 56, 56)]


def _attached(transform: pd.Transform) -> nn.Module:
    m = nn.Sequential(nn.Identity()).train()
    pd.attach(m, "0", transform)
    return m


def _optional(module: str):
    """An optional baseline's module, or None where it does not import."""
    try:
        return importlib.import_module(module)
    except Exception:  # pragma: no cover - optional baseline
        return None


def _timm():
    return _optional("timm.layers.drop")


def _torchvision_ops():
    return _optional("torchvision.ops")


def _dropblock_pkg():
    return _optional("dropblock")


def _id(shape) -> str:
    return "x".join(map(str, shape))


def _fwd_bwd(x: torch.Tensor, g: torch.Tensor, f):
    """A callable running ``f()`` forward and its backward with gradient ``g`` into ``x``."""
    def step():
        x.grad = None
        f().backward(g)
    return step


def _with_fwd_bwd(fns: dict, m: nn.Module, shape) -> None:
    """Add plugdrop's forward+backward and the ``x * mask`` baseline's to ``fns``."""
    xs = torch.randn(shape, requires_grad=True)
    g = torch.randn(shape)
    mask = (torch.rand(shape) > P).float()
    fns["plugdrop fwd+bwd"] = _fwd_bwd(xs, g, lambda: m(xs))
    fns["x*mask fwd+bwd"] = _fwd_bwd(xs, g, lambda: xs * mask)


@pytest.mark.parametrize("shape", SHAPES_2D, ids=_id)
def test_dropblock2d_per_channel_forward(benchmark, shape):
    x = torch.randn(shape)
    m = _attached(pd.DropBlock(P, block_size=7))
    fns = {"plugdrop": lambda: m(x), "x*x": lambda: x * x}
    if (timm := _timm()) is not None:
        fns["timm"] = lambda: timm.drop_block_2d(x, P, 7, couple_channels=False)
    if (ops := _torchvision_ops()) is not None:
        fns["torchvision"] = lambda: ops.drop_block2d(x, P, 7)
    record(benchmark, f"DropBlock2d per-channel fwd {_id(shape)}", interleaved(fns))
    benchmark.pedantic(fns["plugdrop"], rounds=3, iterations=1)


@pytest.mark.parametrize("shape", SHAPES_2D, ids=_id)
def test_dropblock2d_per_channel_forward_backward(benchmark, shape):
    x = torch.randn(shape, requires_grad=True)
    g = torch.randn(shape)
    mask = (torch.rand(shape) > P).float()
    m = _attached(pd.DropBlock(P, block_size=7))
    fns = {"plugdrop": _fwd_bwd(x, g, lambda: m(x)), "x*mask": _fwd_bwd(x, g, lambda: x * mask)}
    if (timm := _timm()) is not None:
        fns["timm"] = _fwd_bwd(x, g, lambda: timm.drop_block_2d(x, P, 7, couple_channels=False))
    if (ops := _torchvision_ops()) is not None:
        fns["torchvision"] = _fwd_bwd(x, g, lambda: ops.drop_block2d(x, P, 7))
    record(benchmark, f"DropBlock2d per-channel fwd+bwd {_id(shape)}", interleaved(fns))
    benchmark.pedantic(fns["plugdrop"], rounds=3, iterations=1)


#: Stage shapes of resnet50 (batch 8 at 224 px: stage 1 input, and batch 32 stage 4), of
#: convnext_tiny (batch 16: stages 1 and 3), a small batch, and the sizes between.
SHAPES_STAGES = [(8, 64, 112, 112), (32, 2048, 7, 7), (16, 512, 28, 28), (16, 96, 56, 56),
                 (16, 384, 14, 14), (1, 256, 28, 28), (3, 256, 28, 28)]


@pytest.mark.parametrize("block", [3, 5, 7])
@pytest.mark.parametrize("shape", SHAPES_STAGES, ids=_id)
def test_dropblock2d_per_channel_block_sizes(benchmark, shape, block):
    """Forward against ``x * x`` (the floor of an op that is not in place) and forward +
    backward against ``x * mask`` + ``g * mask``, at every block size."""
    x = torch.randn(shape)
    m = _attached(pd.DropBlock(P, block_size=block))
    fns = {"plugdrop": lambda: m(x), "x*x": lambda: x * x}
    _with_fwd_bwd(fns, m, shape)
    med = interleaved(fns, budget_s=2.0)
    record(benchmark, f"DropBlock2d per-channel fwd block {block} {_id(shape)}",
           {k: med[k] for k in ("plugdrop", "x*x")})
    benchmark.extra_info["fwd+bwd ratio"] = med["plugdrop fwd+bwd"] / med["x*mask fwd+bwd"]
    benchmark.pedantic(fns["plugdrop"], rounds=1, iterations=1)


def _drop_path_fns(x: torch.Tensor, torchvision: bool) -> dict:
    """Attached DropPath on ``x``, ``x * x``, timm's ``drop_path`` and (if asked)
    torchvision's ``stochastic_depth``."""
    m = _attached(pd.DropPath(P))
    fns = {"plugdrop": lambda: m(x), "x*x": lambda: x * x}
    if (timm := _timm()) is not None:
        fns["timm"] = lambda: timm.drop_path(x, P, training=True)
    if torchvision and (ops := _torchvision_ops()) is not None:
        fns["torchvision"] = lambda: ops.stochastic_depth(x, P, "row", training=True)
    return fns


@pytest.mark.parametrize("shape", [(64, 197, 384), (256, 197, 384)], ids=_id)
def test_drop_path_vit_tokens(benchmark, shape):
    """DropPath on a ViT-S residual branch (tokens of a 14x14 grid plus a class token)."""
    fns = _drop_path_fns(torch.randn(shape), torchvision=False)
    record(benchmark, f"DropPath fwd ViT-S tokens {_id(shape)}", interleaved(fns))
    benchmark.pedantic(fns["plugdrop"], rounds=1, iterations=1)


@pytest.mark.parametrize("shape", SHAPES_2D, ids=_id)
def test_dropblock2d_shared_forward(benchmark, shape):
    x = torch.randn(shape)
    m = _attached(pd.DropBlock(P, block_size=7, shared_channels=True))
    fns = {"plugdrop": lambda: m(x), "x*x": lambda: x * x}
    if (timm := _timm()) is not None:
        fns["timm"] = lambda: timm.drop_block_2d(x, P, 7, couple_channels=True)
    if (db := _dropblock_pkg()) is not None:
        mod = db.DropBlock2D(block_size=7, drop_prob=P).train()
        fns["dropblock"] = lambda: mod(x)
    record(benchmark, f"DropBlock2d shared fwd {_id(shape)}", interleaved(fns))
    benchmark.pedantic(fns["plugdrop"], rounds=3, iterations=1)


@pytest.mark.parametrize("shape", SHAPES_2D, ids=_id)
def test_dropout2d_forward(benchmark, shape):
    x = torch.randn(shape)
    m = _attached(pd.Dropout2d(P))
    fns = {"plugdrop": lambda: m(x), "x*x": lambda: x * x,
           "torch": lambda: F.dropout2d(x, P, training=True)}
    record(benchmark, f"Dropout2d fwd {_id(shape)}", interleaved(fns))
    benchmark.pedantic(fns["plugdrop"], rounds=3, iterations=1)


@pytest.mark.parametrize("shape", SHAPES_2D, ids=_id)
def test_drop_path_forward(benchmark, shape):
    fns = _drop_path_fns(torch.randn(shape), torchvision=True)
    record(benchmark, f"DropPath fwd {_id(shape)}", interleaved(fns))
    benchmark.pedantic(fns["plugdrop"], rounds=3, iterations=1)


@pytest.mark.parametrize("shape", [(32, 1024, 14, 14)], ids=_id)
def test_dropout_forward(benchmark, shape):
    x = torch.randn(shape)
    m = _attached(pd.Dropout(P))
    fns = {"plugdrop": lambda: m(x), "x*x": lambda: x * x,
           "torch": lambda: F.dropout(x, P, training=True)}
    record(benchmark, f"Dropout fwd {_id(shape)}", interleaved(fns))
    benchmark.pedantic(fns["plugdrop"], rounds=3, iterations=1)


@pytest.mark.parametrize("shape,block", [((32, 1024, 196), 7), ((16, 512, 784), 7)],
                         ids=lambda v: _id(v) if isinstance(v, tuple) else str(v))
def test_dropblock1d_forward(benchmark, shape, block):
    x = torch.randn(shape)
    m = _attached(pd.DropBlock(P, block_size=block))
    mf = {"plugdrop": lambda: m(x), "x*x": lambda: x * x}
    _with_fwd_bwd(mf, m, shape)
    med = interleaved(mf)
    record(benchmark, f"DropBlock1d per-channel fwd {_id(shape)}",
           {k: med[k] for k in ("plugdrop", "x*x")})
    benchmark.extra_info["fwd+bwd ratio"] = med["plugdrop fwd+bwd"] / med["x*mask fwd+bwd"]
    benchmark.pedantic(mf["plugdrop"], rounds=3, iterations=1)


@pytest.mark.parametrize("shape", [(8, 256, 8, 14, 14), (4, 128, 16, 28, 28)], ids=_id)
def test_dropblock3d_forward(benchmark, shape):
    x = torch.randn(shape)
    m = _attached(pd.DropBlock(P, block_size=3))
    fns = {"plugdrop": lambda: m(x), "x*x": lambda: x * x}
    if (ops := _torchvision_ops()) is not None:
        fns["torchvision"] = lambda: ops.drop_block3d(x, P, 3)
    _with_fwd_bwd(fns, m, shape)
    med = interleaved(fns)
    fwd = {k: v for k, v in med.items() if "fwd+bwd" not in k}
    record(benchmark, f"DropBlock3d per-channel fwd {_id(shape)}", fwd)
    benchmark.extra_info["fwd+bwd ratio"] = med["plugdrop fwd+bwd"] / med["x*mask fwd+bwd"]
    benchmark.pedantic(fns["plugdrop"], rounds=3, iterations=1)


@pytest.mark.parametrize("shape", [(32, 1024, 14, 14), (16, 512, 28, 28)], ids=_id)
def test_gaussian_noise_forward(benchmark, shape):
    x = torch.randn(shape)
    m = _attached(pd.GaussianNoise(P))
    fns = {"plugdrop": lambda: m(x), "x*x": lambda: x * x,
           "x + std * randn_like(x)": lambda: x + P * torch.randn_like(x)}
    record(benchmark, f"GaussianNoise fwd {_id(shape)}", interleaved(fns))
    benchmark.pedantic(fns["plugdrop"], rounds=3, iterations=1)

"""The golden cases: every transform on every kernel path, seeded, on small fixed inputs.

Each case returns named tensors: outputs, input gradients (of ``(out * w).sum()`` with a fixed
``w``), parameter gradients, mixing weights. ``test_golden.py`` compares them with the stored
``transforms.pt``; a change that moves any number fails. Inputs come from their own generators
(not the global one); the masks come from torch's global generator, seeded before each call,
exactly as a user's ``torch.manual_seed`` does.

The paths are forced the way a user's situation forces them: the fused C kernel (CPU float,
the default), the torch-op paths (``_kernels.autograd.USE_CEXT = False``: no compiler, or the
kernel switched off), the dense paths (a large ``p``, ``rescale="count"``), a 0-dim tensor
``p`` (what ``torch.compile`` traces: the kernel's custom op, or plain tensor ops), compiled
(``torch.compile``), and the hooks' eager fast paths (a second call of the same shape).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as TF

import plugdrop as pd
from plugdrop import functional as F
from plugdrop._kernels import autograd as KA
from plugdrop._kernels import cext

Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[], Tensors]


def data(shape: tuple[int, ...], seed: int, dtype: torch.dtype = torch.float32,
         channels_last: bool = False) -> torch.Tensor:
    """A fixed input: normal values from a generator of its own."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4
                         else torch.channels_last_3d)
    return x


@contextlib.contextmanager
def no_cext() -> Iterator[None]:
    """The torch-op paths: the fused kernel switched off."""
    old = KA.USE_CEXT
    KA.USE_CEXT = False
    try:
        yield
    finally:
        KA.USE_CEXT = old


def _grad(x: torch.Tensor, out: torch.Tensor, seed: int = 99) -> torch.Tensor:
    w = data(tuple(out.shape), seed, out.dtype)
    (g,) = torch.autograd.grad((out * w).sum(), x)
    return g


def functional(fn: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, ...],
               seed: int = 7, **data_kw: object) -> Callable[[], Tensors]:
    """``fn(x)`` of a public function: output and input gradient."""
    def run() -> Tensors:
        x = data(shape, 0, **data_kw).requires_grad_()  # type: ignore[arg-type]
        torch.manual_seed(seed)
        out = fn(x)
        return {"out": out.detach(), "grad": _grad(x, out)}
    return run


def hooked(make: Callable[[], pd.Transform], shape: tuple[int, ...], calls: int = 2,
           steps: int = 0, compiled: str | None = None, **data_kw: object
           ) -> Callable[[], Tensors]:
    """The transform attached to an identity layer, ``calls`` training forwards (the second
    one of a shape takes the hooks' cached fast paths), ``steps`` schedule steps between
    them; optionally through ``torch.compile`` with the given backend."""
    def run() -> Tensors:
        model = nn.Sequential(nn.Identity())
        h = pd.attach(model, "0", make())
        net = torch.compile(model, backend=compiled, fullgraph=True) if compiled else model
        out: Tensors = {}
        try:
            for i in range(calls):
                x = data(shape, i, **data_kw).requires_grad_()  # type: ignore[arg-type]
                torch.manual_seed(100 + i)
                y = net(x)
                out[f"out{i}"] = y.detach()
                out[f"grad{i}"] = _grad(x, y, 50 + i)
                h.step(steps)
        finally:
            h.remove()
        return out
    return run


def gradient(make: Callable[[], pd.Transform], shape: tuple[int, ...] = (3, 5, 4)
             ) -> Callable[[], Tensors]:
    """A gradient transform on an activation: the gradient reaching the input, forward kept."""
    def run() -> Tensors:
        model = nn.Sequential(nn.Identity())
        h = pd.attach(model, "0", make())
        try:
            x = data(shape, 0).mul(3).requires_grad_()
            torch.manual_seed(100)
            y = model(x)
            assert torch.equal(y, x)
            return {"grad": _grad(x, y)}
        finally:
            h.remove()
    return run


def params(make: Callable[[], pd.Transform], exclude: str | None = None
           ) -> Callable[[], Tensors]:
    """A gradient transform on the parameters of a small network (``where="params"``)."""
    def run() -> Tensors:
        torch.manual_seed(3)
        model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 4))
        h = pd.attach(model, "", make(), where="params", exclude=exclude)
        try:
            x = data((8, 6), 0).mul(4)
            torch.manual_seed(100)
            loss = (model(x) * data((8, 4), 1)).sum()
            loss.backward()
            return {name: p.grad.clone() for name, p in model.named_parameters()
                    if p.grad is not None}
        finally:
            h.remove()
    return run


class _Net(nn.Module):
    """A small network with named stages for the mixing transforms."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3, padding=1)
        self.layer1 = nn.Sequential(nn.Conv2d(6, 6, 3, padding=1), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Conv2d(6, 8, 3, padding=1), nn.ReLU())
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(x.mean((2, 3)))


def mixing(make: Callable[[], pd.Transform], layers: list[str], calls: int = 3
           ) -> Callable[[], Tensors]:
    """A coordinated transform on a small network: logits, the mixed loss, its input
    gradient, and what each forward mixed."""
    def run() -> Tensors:
        torch.manual_seed(5)
        net = _Net()
        h = pd.attach(net, layers, make())
        out: Tensors = {}
        try:
            for i in range(calls):
                x = data((6, 3, 8, 8), i).requires_grad_()
                y = torch.arange(6) % 5
                torch.manual_seed(200 + i)
                logits = net(x)
                loss = h.loss(TF.cross_entropy, logits, y)
                (g,) = torch.autograd.grad(loss, x)
                out[f"logits{i}"] = logits.detach()
                out[f"loss{i}"] = loss.detach()
                out[f"grad{i}"] = g
                lam = h.lam
                out[f"lam{i}"] = torch.as_tensor(-1.0 if lam is None else lam,
                                                 dtype=torch.float64)
                out[f"index{i}"] = h.index if h.index is not None else torch.zeros(0)
                out[f"layer{i}"] = torch.tensor(-1 if h.layer is None else
                                                (layers.index(h.layer)))
        finally:
            h.remove()
        return out
    return run


def _hashed_reference() -> Tensors:
    """The fused kernel's generator in torch ops (the path a gradient of another layout, or a
    machine without the kernel, takes): blocks from a fixed key."""
    x = data((2, 4, 12, 12), 0)
    scale = torch.full((12, 12), 1.25)
    key = torch.tensor([123456789, 987654321], dtype=torch.int64)
    thresh = cext.thresholds(0.05)
    valid = (10, 10)
    with no_cext():
        ref = KA.hashed_block_drop(x, scale, key, 4, valid, (3, 3), thresh)
    fused = KA.hashed_block_drop(x, scale, key, 4, valid, (3, 3), thresh)
    return {"torch_op": ref, "fused": fused}


def _under(ctx: Callable[[], contextlib.AbstractContextManager[None]],
           run: Callable[[], Tensors]) -> Callable[[], Tensors]:
    def wrapped() -> Tensors:
        with ctx():
            return run()
    return wrapped


def _tensor(value: float) -> torch.Tensor:
    return torch.tensor(value)


MAP = (2, 4, 12, 12)
BIG = (4, 64, 16, 16)      # from 65,536 elements: Dropout2d's and the noise kernel's sizes
VEC = (4, 2048)            # from 4,096 positions: the sparse Bernoulli draws

CASES: list[Case] = [
    # ------------------------------------------------------------------ DropBlock
    Case("drop_block/fused", functional(lambda x: F.drop_block(x, 0.1, 3), MAP)),
    Case("drop_block/fused-channels-last",
         functional(lambda x: F.drop_block(x, 0.1, 3), MAP, channels_last=True)),
    Case("drop_block/fused-shared",
         functional(lambda x: F.drop_block(x, 0.1, 3, shared_channels=True), MAP)),
    Case("drop_block/fused-1d", functional(lambda x: F.drop_block(x, 0.1, 3), (2, 4, 30))),
    Case("drop_block/fused-3d", functional(lambda x: F.drop_block(x, 0.1, (2, 3, 3)),
                                           (2, 3, 5, 6, 6))),
    Case("drop_block/fused-float64",
         functional(lambda x: F.drop_block(x, 0.1, 3), MAP, dtype=torch.float64)),
    Case("drop_block/torch-op-sparse", _under(no_cext, functional(
        lambda x: F.drop_block(x, 0.1, 3), BIG))),
    Case("drop_block/torch-op-hashed-reference", _hashed_reference),
    Case("drop_block/dense", functional(lambda x: F.drop_block(x, 0.6, 3), MAP)),
    Case("drop_block/dense-count", functional(lambda x: F.drop_block(x, 0.1, 3,
                                                                     rescale="count"), MAP)),
    Case("drop_block/dense-none", functional(lambda x: F.drop_block(x, 0.6, 3,
                                                                    rescale="none"), MAP)),
    Case("drop_block/bfloat16", functional(lambda x: F.drop_block(x, 0.1, 3), MAP,
                                           dtype=torch.bfloat16)),
    Case("drop_block/tokens", functional(
        lambda x: F.drop_block(x, 0.2, 2, layout="tokens"), (2, 17, 6))),
    Case("drop_block/tensor-p-custom-op", functional(
        lambda x: F.drop_block(x, _tensor(0.1), 3), MAP)),
    Case("drop_block/tensor-p-torch-ops", _under(no_cext, functional(
        lambda x: F.drop_block(x, _tensor(0.1), 3), MAP))),
    Case("DropBlock/hooked", hooked(lambda: pd.DropBlock(0.1, 3), MAP)),
    Case("DropBlock/hooked-schedule", hooked(
        lambda: pd.DropBlock(pd.linear(0.0, 0.2, steps=4), 3), MAP, calls=3, steps=2)),
    Case("DropBlock/hooked-tokens-grid", hooked(
        lambda: pd.DropBlock(0.2, 2, layout="tokens", grid_size=(3, 4), prefix_tokens=1),
        (2, 13, 6))),
    Case("DropBlock/compiled", hooked(lambda: pd.DropBlock(0.1, 3), MAP, calls=2,
                                      compiled="aot_eager")),
    Case("DropBlock/compiled-torch-ops", _under(no_cext, hooked(
        lambda: pd.DropBlock(0.1, 3), MAP, calls=2, compiled="aot_eager"))),
    # ------------------------------------------------------------------ Dropout2d
    Case("dropout2d/broadcast", functional(lambda x: F.dropout2d(x, 0.3), MAP)),
    Case("dropout2d/fused", functional(lambda x: F.dropout2d(x, 0.3), BIG)),
    Case("dropout2d/fused-torch-op", _under(no_cext, functional(
        lambda x: F.dropout2d(x, 0.3), BIG))),
    Case("dropout2d/channels-last", functional(lambda x: F.dropout2d(
        x, 0.3, layout="channels_last"), (2, 5, 5, 6))),
    Case("dropout2d/tensor-p", functional(lambda x: F.dropout2d(x, _tensor(0.3)), MAP)),
    Case("Dropout2d/hooked", hooked(lambda: pd.Dropout2d(0.3), MAP, calls=3)),
    Case("Dropout2d/hooked-fused", hooked(lambda: pd.Dropout2d(0.3), BIG)),
    # ------------------------------------------------------------------ Dropout
    Case("dropout/native", functional(lambda x: F.dropout(x, 0.4), MAP)),
    Case("dropout/sparse", functional(lambda x: F.dropout(x, 0.1), VEC)),
    Case("dropout/tensor-p", functional(lambda x: F.dropout(x, _tensor(0.4)), MAP)),
    Case("Dropout/hooked", hooked(lambda: pd.Dropout(0.1), VEC)),
    # ------------------------------------------------------------------ DropPath
    Case("drop_path/float", functional(lambda x: F.drop_path(x, 0.5), (8, 3, 4))),
    Case("drop_path/no-scale", functional(lambda x: F.drop_path(x, 0.5, scale_by_keep=False),
                                          (8, 3, 4))),
    Case("drop_path/tensor-p", functional(lambda x: F.drop_path(x, _tensor(0.5)), (8, 3, 4))),
    Case("DropPath/hooked", hooked(lambda: pd.DropPath(0.5), (8, 3, 4), calls=3)),
    Case("DropPath/compiled", hooked(lambda: pd.DropPath(0.5), (8, 3, 4),
                                     compiled="aot_eager")),
    # ------------------------------------------------------------------ DropHead
    Case("drop_head/float", functional(lambda x: F.drop_head(x, 0.4, 4), (6, 5, 8))),
    Case("drop_head/tensor-p", functional(lambda x: F.drop_head(x, _tensor(0.4), 4),
                                          (6, 5, 8))),
    Case("DropHead/hooked", hooked(lambda: pd.DropHead(0.4, num_heads=4), (6, 5, 8))),
    # ------------------------------------------------------------------ DropToken
    Case("drop_token/tokens-prefix", functional(
        lambda x: F.drop_token(x, 0.3, prefix_tokens=1), (4, 9, 5))),
    Case("drop_token/channels-first", functional(
        lambda x: F.drop_token(x, 0.3, layout="channels_first"), MAP)),
    Case("drop_token/tensor-p", functional(lambda x: F.drop_token(x, _tensor(0.3)), (4, 9, 5))),
    Case("DropToken/hooked", hooked(lambda: pd.DropToken(0.3, prefix_tokens=1), (4, 9, 5))),
    # ------------------------------------------------------------------ noise
    Case("gaussian_noise/kernel", functional(lambda x: F.gaussian_noise(x, 0.2), BIG)),
    Case("gaussian_noise/kernel-multiplicative",
         functional(lambda x: F.gaussian_noise(x, 0.2, multiplicative=True), BIG)),
    Case("gaussian_noise/randn", functional(lambda x: F.gaussian_noise(x, 0.2), MAP)),
    Case("gaussian_noise/randn-multiplicative",
         functional(lambda x: F.gaussian_noise(x, 0.2, multiplicative=True), MAP)),
    Case("gaussian_noise/torch-op", _under(no_cext, functional(
        lambda x: F.gaussian_noise(x, 0.2), BIG))),
    Case("gaussian_noise/tensor-std", functional(lambda x: F.gaussian_noise(x, _tensor(0.2)),
                                                 MAP)),
    Case("GaussianNoise/hooked", hooked(lambda: pd.GaussianNoise(0.2), MAP)),
    # ------------------------------------------------------------------ gradients
    Case("ClipGradValue/activation", gradient(lambda: pd.ClipGradValue(0.5))),
    Case("ClipGradNorm/activation", gradient(lambda: pd.ClipGradNorm(1.0))),
    Case("ScaleGrad/activation", gradient(lambda: pd.ScaleGrad(-0.5))),
    Case("GradNoise/activation", gradient(lambda: pd.GradNoise(0.3))),
    Case("ClipGradValue/params", params(lambda: pd.ClipGradValue(0.5))),
    Case("ClipGradNorm/params", params(lambda: pd.ClipGradNorm(1.0))),
    Case("ScaleGrad/params", params(lambda: pd.ScaleGrad(0.25))),
    Case("GradNoise/params", params(lambda: pd.GradNoise(0.3))),
    Case("ClipGradAdaptive/params", params(lambda: pd.ClipGradAdaptive(0.01), exclude="2")),
    Case("CentralizeGrad/params", params(lambda: pd.CentralizeGrad())),
    # ------------------------------------------------------------------ mixing
    Case("ManifoldMixup/mixup", mixing(lambda: pd.ManifoldMixup(2.0), ["", "layer1", "layer2"])),
    Case("ManifoldMixup/cutmix", mixing(lambda: pd.ManifoldMixup(1.0, mode="cutmix"),
                                        ["layer1", "layer2"])),
    Case("PatchUp/hard", mixing(lambda: pd.PatchUp(0.3, 3), ["layer1", "layer2"])),
    Case("PatchUp/soft", mixing(lambda: pd.PatchUp(0.3, 3, mode="soft"), ["layer1", "layer2"])),
    Case("functional/mixup", functional(
        lambda x: F.mixup(x, 0.3, torch.tensor([2, 0, 1])), (3, 4, 5))),
    Case("functional/cutmix", functional(
        lambda x: F.cutmix(x, 0.6, torch.tensor([2, 0, 1]))[0], (3, 4, 6, 6))),
    Case("functional/patchup", functional(
        lambda x: F.patchup(x, 0.3, torch.tensor([2, 0, 1]), 3)[0], (3, 4, 8, 8))),
    # ------------------------------------------------------------------ per-layer settings
    Case("by_depth/DropPath", lambda: _by_depth()),
]


def _by_depth() -> Tensors:
    """DropPath with a rate growing with depth over three layers, times a ramp."""
    model = nn.Sequential(nn.Identity(), nn.Identity(), nn.Identity())
    h = pd.attach(model, ["0", "1", "2"], pd.DropPath(
        pd.by_depth(0.0, 0.6) * pd.linear(0.5, 1.0, steps=2)))
    out: Tensors = {}
    try:
        for i in range(2):
            x = data((16, 3), i).requires_grad_()
            torch.manual_seed(300 + i)
            y = model(x)
            out[f"out{i}"] = y.detach()
            out[f"grad{i}"] = _grad(x, y)
            h.step()
    finally:
        h.remove()
    return out

"""CUDA paths (skipped without a GPU): no host-device synchronization in any transform's
forward or backward, dtype and statistics kept."""

import pytest
import torch

import plugdrop as pd

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

MAKERS = [lambda: pd.DropBlock(0.1, 7), lambda: pd.DropBlock(0.1, 3, shared_channels=True),
          lambda: pd.DropBlock(0.1, 5, rescale="count"), lambda: pd.Dropout2d(0.1),
          lambda: pd.DropPath(0.1), lambda: pd.Dropout(0.1), lambda: pd.GaussianNoise(0.1),
          lambda: pd.ClipGradNorm(1.0), lambda: pd.ClipGradValue(0.1), lambda: pd.ScaleGrad(-1.0),
          lambda: pd.GradNoise(0.01)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("make", MAKERS)
def test_no_sync_forward_backward(make, dtype):
    m = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1)).cuda().to(dtype).train()
    pd.attach(m, "0", make())
    x = torch.randn(8, 16, 28, 28, device="cuda", dtype=dtype)
    m(x).sum().backward()  # warm-up: lazy tensors, caches
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        y = m(x)
        y.float().sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert y.dtype == dtype and y.device.type == "cuda"


def test_dropblock_fraction_on_cuda():
    y = pd.functional.drop_block(torch.ones(2000, 8, 14, 14, device="cuda"), 0.1, 7)
    frac = (y == 0).float().mean().item()
    assert abs(frac - 0.1) < 0.005


def test_one_seed_draws_the_same_dropblock_mask_on_the_cpu_and_the_gpu():
    # The Triton kernel draws the C kernel's seeds for the same key: torch.manual_seed gives
    # one mask on both devices (float32 values equal too), forward and backward.
    from plugdrop._kernels import cext, gpu

    if cext.library() is None or not gpu.available():
        pytest.skip("needs the C kernel and Triton")
    x = torch.randn(8, 32, 14, 14)
    for fmt in (torch.contiguous_format, torch.channels_last):
        outs = []
        for device in ("cpu", "cuda"):
            t = x.to(device).contiguous(memory_format=fmt).requires_grad_()
            torch.manual_seed(5)
            y = pd.functional.drop_block(t, 0.1, 5)
            (g,) = torch.autograd.grad(y, t, torch.ones_like(y))
            outs.append((y.detach().cpu(), g.cpu()))
        assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def test_compiled_dropblock_on_the_gpu_is_one_graph_without_a_sync():
    torch._dynamo.reset()
    m = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1)).cuda().train()
    h = pd.attach(m, "0", pd.DropBlock(pd.linear(0.0, 0.2, steps=10), 5))
    counts = []

    def backend(gm, inputs):
        counts.append(1)
        return gm.forward

    cm = torch.compile(m, backend=backend, fullgraph=True)
    x = torch.randn(8, 16, 28, 28, device="cuda")
    cm(x).sum().backward()
    h.step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            cm(x).sum().backward()
            h.step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert len(counts) == 1
    torch._dynamo.reset()

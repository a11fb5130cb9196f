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

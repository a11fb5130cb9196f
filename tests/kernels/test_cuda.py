"""CUDA paths (skipped without a GPU): no host-device synchronization in any transform's
forward or backward, dtype and statistics kept; under CUDA graphs (``torch.cuda.graph`` and
``torch.compile(mode="reduce-overhead")``) a new mask at every replay."""

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


# ------------------------------------------------------------------------- CUDA graphs

#: each transform whose mask the Triton kernels or torch draw: fused DropBlock (per channel
#: and shared), fused Dropout2d (maps under 256 elements, 65,536 elements and more), noise
GRAPHED = {"dropblock": lambda: pd.DropBlock(0.2, 3),
           "dropblock_shared": lambda: pd.DropBlock(0.2, 3, shared_channels=True),
           "dropout2d": lambda: pd.Dropout2d(0.2), "noise": lambda: pd.GaussianNoise(0.5),
           "dropout": lambda: pd.Dropout(0.2)}


def _captured(make):
    """An attached transform on an identity layer, its forward and backward captured in one
    CUDA graph (warmed up on a side stream first, as torch's docs ask): (graph, x, y, grad)."""
    m = torch.nn.Sequential(torch.nn.Identity()).cuda().train()
    pd.attach(m, "0", make())
    x = torch.randn(64, 16, 8, 8, device="cuda", requires_grad=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            torch.autograd.grad(m(x).sum(), x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = m(x)
        (g,) = torch.autograd.grad(y.sum(), x)
    return graph, x, y, g


@pytest.mark.parametrize("name", list(GRAPHED))
def test_each_replay_of_a_captured_graph_draws_a_new_mask(name):
    # The key is drawn on the device by torch's generator while the graph captures, and the
    # kernels read it there: a replay draws a new one (not the mask of the capture, baked),
    # the backward of a replay masks the gradient with that replay's mask, and
    # torch.manual_seed before the replays reproduces them.
    graph, x, y, g = _captured(GRAPHED[name])
    runs = []
    for _ in range(2):
        torch.manual_seed(3)
        outs = []
        for _ in range(3):
            graph.replay()
            outs.append((y.detach().clone(), g.clone()))
        runs.append(outs)
    torch.cuda.synchronize()
    for (y1, g1), (y2, g2) in zip(runs[0], runs[1]):
        assert torch.equal(y1, y2) and torch.equal(g1, g2)  # the seed reproduces the replays
    outs = runs[0]
    for (y1, _), (y2, _) in zip(outs, outs[1:]):
        assert not torch.equal(y1, y2), "a replay drew the mask of the one before"
    for yy, gg in outs:
        if name != "noise":  # a masking: the gradient is 0 exactly where the output is
            assert torch.equal(yy == 0, gg == 0)
            assert 0.1 < (yy == 0).float().mean().item() < 0.3


def test_reduce_overhead_compiles_and_trains_with_every_attached_transform():
    # inductor's CUDA graphs (cudagraph trees): every tensor the backward saves is a tracked
    # output, none of plugdrop's cached constants is made in the graphs' pool, a scheduled p
    # is read at each step, and each step draws a new mask.
    torch._dynamo.reset()
    m = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.Identity(),
                            torch.nn.Conv2d(32, 8, 1)).cuda().train()
    handles = [pd.attach(m, "0", pd.DropBlock(pd.linear(0.1, 0.3, steps=4), 3)),
               pd.attach(m, "1", pd.Dropout2d(0.1)),
               pd.attach(m, "2", pd.GaussianNoise(0.1)),
               pd.attach(m, "3", pd.DropBlock(0.2, 3, shared_channels=True))]
    cm = torch.compile(m, mode="reduce-overhead")
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x = torch.randn(16, 16, 14, 14, device="cuda")
    before = [p.detach().clone() for p in m.parameters()]
    for _ in range(6):
        torch.compiler.cudagraph_mark_step_begin()
        loss = cm(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        for h in handles:
            h.step()
        assert torch.isfinite(loss).item()
    assert any(not torch.equal(a, b) for a, b in zip(before, m.parameters()))
    torch._dynamo.reset()


def test_reduce_overhead_draws_a_new_mask_each_step_and_follows_the_schedule():
    torch._dynamo.reset()
    m = torch.nn.Sequential(torch.nn.Identity()).cuda().train()
    h = pd.attach(m, "0", pd.DropBlock(pd.linear(0.2, 0.4, steps=1), 3))
    cm = torch.compile(m, mode="reduce-overhead")
    x = torch.ones(64, 16, 12, 12, device="cuda")
    outs = []
    for step in range(5):
        if step == 4:
            h.step()  # p: 0.2, then 0.4
        torch.compiler.cudagraph_mark_step_begin()
        outs.append(cm(x).clone())
    dropped = [(o == 0).float().mean().item() for o in outs]
    assert all(0.15 < d < 0.25 for d in dropped[:4]) and 0.34 < dropped[4] < 0.46, dropped
    for a, b in zip(outs[:3], outs[1:4]):
        assert not torch.equal(a == 0, b == 0), "a step replayed the mask of the one before"
    torch._dynamo.reset()

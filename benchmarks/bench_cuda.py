"""The CUDA paths (skipped without a GPU; ``./dev bench-gpu`` runs them and writes
``benchmarks/RESULTS-cuda.md``): each transform through the public attach path against
``x * x``, timm's and torchvision's implementations, and whole training steps of timm models
(bf16 autocast, channels-last) against the bare model and timm's own rate arguments, all
interleaved in one process; and the first steps of the stochastic-depth models, each in a
fresh process. Each timed call runs the candidate ``reps`` times and then waits for the device
(``torch.cuda.synchronize``), so a ratio compares what the GPU did, launches included; ms are
per call.

DropBlock, Dropout2d's small maps and noise ship on the Triton kernels
(:mod:`plugdrop._kernels.gpu`) where Triton is. The rows also time the torch-op paths they
replaced (``plugdrop dense``: Triton switched off, the dense mask as it was chosen before),
and DropBlock's two dense masks (grown by max pooling the seeds' uniforms, ``max-pool``, or by
a boolean sliding-window OR, ``window-or``, :mod:`plugdrop._kernels.dense`); timm's
DropBlock2d is run per channel (``couple_channels=False``, as plugdrop's default) and shared
(as plugdrop's ``shared_channels=True``). ``BENCH_ROWS=FILE`` appends each row to FILE as it
is measured (JSON lines), so a run cut short keeps what it measured."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import plugdrop as pd
from _harness import drop_path_model, interleaved
from _harness import record as _record
from plugdrop._kernels import autograd as KA
from plugdrop._kernels import dense

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
timm = pytest.importorskip("timm")

P = 0.1


def record(benchmark, case: str, medians: dict[str, float], **kw: object) -> None:
    _record(benchmark, case, medians, **kw)
    if os.environ.get("BENCH_ROWS"):
        with open(os.environ["BENCH_ROWS"], "a") as f:
            f.write(json.dumps(benchmark.extra_info) + "\n")


def _mask(path: str, f: Callable[[], object]) -> Callable[[], object]:
    """``f`` with the kernels of ``path``: ``triton`` (what ships), ``dense`` (Triton off, the
    torch-op paths as they were chosen before), ``max-pool`` or ``window-or`` (Triton off,
    DropBlock's dense mask drawn that way)."""
    def run() -> object:
        old, old_triton = dense.pooled, KA.USE_TRITON
        if path != "triton":
            KA.USE_TRITON = False
        if path in ("max-pool", "window-or"):
            dense.pooled = (lambda device, seeds: path == "max-pool")  # type: ignore[assignment]
        try:
            return f()
        finally:
            dense.pooled = old  # type: ignore[assignment]
            KA.USE_TRITON = old_triton
    return run


def _timm_dropblock(shared: bool) -> nn.Module:
    import timm.layers.drop as tdrop
    try:
        return tdrop.DropBlock2d(P, block_size=7, couple_channels=shared).train()
    except TypeError:  # a timm before couple_channels: per channel
        if shared:
            pytest.skip("this timm's DropBlock2d has no shared mask")
        return tdrop.DropBlock2d(P, block_size=7).train()


def _timed(fns: dict[str, Callable[[], object]], reps: int, **kw: object) -> dict[str, float]:
    """Median seconds per call of each function, ``reps`` calls per timed round then one
    synchronization, rounds interleaved."""
    def block(f: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(reps):
                f()
            torch.cuda.synchronize()
        return run
    med = interleaved({k: block(f) for k, f in fns.items()}, **kw)  # type: ignore[arg-type]
    return {k: v / reps for k, v in med.items()}


def _attached(transform: pd.Transform) -> nn.Module:
    m = nn.Sequential(nn.Identity()).train()
    pd.attach(m, "0", transform)
    return m


def _id(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


DTYPES = [torch.float32, torch.bfloat16]
SHAPES = [(32, 1024, 14, 14), (64, 256, 56, 56), (128, 2048, 7, 7)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_dropblock_forward(benchmark, shape, dtype):
    tv = pytest.importorskip("torchvision.ops")
    x = torch.randn(shape, device="cuda", dtype=dtype)
    ours = _attached(pd.DropBlock(P, block_size=7))
    theirs = _timm_dropblock(shared=False)
    fns = {"plugdrop": _mask("triton", lambda: ours(x)),
           "plugdrop dense": _mask("dense", lambda: ours(x)),
           "x*x": lambda: x * x, "timm per channel": lambda: theirs(x),
           "torchvision": lambda: tv.drop_block2d(x, P, 7, training=True)}
    med = _timed(fns, reps=20, budget_s=2.0, min_rounds=11, max_rounds=40)
    record(benchmark, f"CUDA DropBlock fwd {_id(shape)} {str(dtype)[6:]}", med)
    benchmark.pedantic(fns["plugdrop"], rounds=3, iterations=1)


def test_shared_dropblock_forward(benchmark):
    x = torch.randn(64, 256, 56, 56, device="cuda", dtype=torch.bfloat16)
    ours = _attached(pd.DropBlock(P, block_size=7, shared_channels=True))
    theirs = _timm_dropblock(shared=True)
    fns = {"plugdrop": _mask("triton", lambda: ours(x)),
           "plugdrop dense": _mask("dense", lambda: ours(x)),
           "x*x": lambda: x * x, "timm shared": lambda: theirs(x)}
    med = _timed(fns, reps=20, budget_s=2.0, min_rounds=11, max_rounds=40)
    record(benchmark, "CUDA DropBlock shared_channels fwd 64x256x56x56 bfloat16", med)
    benchmark.pedantic(fns["plugdrop"], rounds=3, iterations=1)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES[:2], ids=_id)
def test_dropblock_forward_backward(benchmark, shape, dtype):
    x = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(shape, device="cuda", dtype=dtype)
    mask = (torch.rand(shape, device="cuda") >= P).to(dtype)
    ours = _attached(pd.DropBlock(P, block_size=7))
    theirs = _timm_dropblock(shared=False)

    def step(f: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            x.grad = None
            f().backward(g)
        return run
    fns = {"plugdrop": _mask("triton", step(lambda: ours(x))),
           "plugdrop dense": _mask("dense", step(lambda: ours(x))),
           "x*mask": step(lambda: x * mask), "timm per channel": step(lambda: theirs(x))}
    med = _timed(fns, reps=10, budget_s=2.0, min_rounds=11, max_rounds=40)
    record(benchmark, f"CUDA DropBlock fwd+bwd {_id(shape)} {str(dtype)[6:]}", med)
    benchmark.pedantic(fns["plugdrop"], rounds=3, iterations=1)


def test_other_transforms_forward(benchmark):
    """Dropout2d, DropPath, Dropout and GaussianNoise at 64x256x56x56 bf16 against ``x * x`` and
    the equivalent torch or timm function."""
    from timm.layers import drop_path
    shape = (64, 256, 56, 56)
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    cases = {
        "Dropout2d": (pd.Dropout2d(P), lambda: F.dropout2d(x, P, True)),
        "DropPath": (pd.DropPath(P), lambda: drop_path(x, P, True)),
        "Dropout": (pd.Dropout(P), lambda: F.dropout(x, P, True)),
        "GaussianNoise": (pd.GaussianNoise(P), lambda: x + P * torch.randn_like(x)),
    }
    notes = []
    fns: dict[str, Callable[[], object]] = {"x*x": lambda: x * x}
    for name, (transform, baseline) in cases.items():
        m = _attached(transform)
        fns[name] = _mask("triton", lambda m=m: m(x))
        fns[f"{name} (torch/timm)"] = baseline
    fns["GaussianNoise dense"] = _mask("dense", lambda m=_attached(pd.GaussianNoise(P)): m(x))
    med = _timed(fns, reps=20, budget_s=3.0, min_rounds=11, max_rounds=40)
    for name in cases:
        notes.append(f"{name} {med[name] * 1e3:.3f} ms: {med[name] / med['x*x']:.2f}x x*x, "
                     f"{med[name] / med[f'{name} (torch/timm)']:.2f}x torch/timm")
    notes.append(f"GaussianNoise {med['GaussianNoise'] / med['GaussianNoise dense']:.2f}x "
                 f"its torch-op path")
    # The subject of the row is DropPath (the table shows one subject per case).
    fns["plugdrop"] = fns["DropPath"]
    med["plugdrop"] = med["DropPath"]
    record(benchmark, "CUDA other transforms fwd 64x256x56x56 bf16",
           {k: med[k] for k in ("plugdrop", "x*x", "DropPath (torch/timm)")},
           note="; ".join(notes))
    benchmark.pedantic(fns["plugdrop"], rounds=3, iterations=1)


def _step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

    def run() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return run


def test_resnet50_train_step(benchmark):
    """timm resnet50, batch 64, 224 px: per-channel DropBlock on layer3.* and layer4.* against
    the bare model and timm's ``drop_block_rate`` (0.1)."""
    torch.manual_seed(0)
    x = torch.randn(64, 3, 224, 224, device="cuda").contiguous(
        memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (64,), device="cuda")

    def make(**kw: object) -> nn.Module:
        return timm.create_model("resnet50", pretrained=False, **kw).cuda().to(
            memory_format=torch.channels_last).train()
    bare = make()
    ours = copy.deepcopy(bare)
    pd.attach(ours, "layer3.*", pd.DropBlock(P, block_size=5))
    pd.attach(ours, "layer4.*", pd.DropBlock(P, block_size=3))
    theirs = make(drop_block_rate=P)
    fns = {"plugdrop": _mask("triton", _step(ours, x, y)),
           "plugdrop dense": _mask("dense", _step(ours, x, y)),
           "bare": _step(bare, x, y), "timm drop_block_rate": _step(theirs, x, y)}
    med = _timed(fns, reps=3, budget_s=6.0, min_rounds=11, max_rounds=30)
    record(benchmark, "CUDA timm resnet50 train step, batch 64, 224 px, bf16, channels-last",
           med, note=f"images/s: plugdrop {64 / med['plugdrop']:.0f}, "
                     f"bare {64 / med['bare']:.0f}")
    benchmark.pedantic(fns["plugdrop"], rounds=2, iterations=1)


@pytest.mark.parametrize("name,batch", [("vit_base_patch16_224", 64),
                                        ("convnext_tiny", 64)])
def test_droppath_train_step(benchmark, name, batch):
    """A whole step at 224 px with drop-path rates 0 to 0.2 and 0 to 0.4 by depth: plain
    DropPath and DropPath(skip_compute=True) against the bare model and timm's
    ``drop_path_rate``."""
    torch.manual_seed(0)
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    bare = timm.create_model(name, pretrained=False).cuda().train()
    theirs = timm.create_model(name, pretrained=False, drop_path_rate=0.2).cuda().train()
    fns = {"bare": _step(bare, x, y), "timm drop_path_rate 0.2": _step(theirs, x, y),
           "plain DropPath 0.4": _step(drop_path_model(bare, x, 0.4, False), x, y),
           "skip_compute 0.2": _step(drop_path_model(bare, x, 0.2, True), x, y),
           "skip_compute 0.4": _step(drop_path_model(bare, x, 0.4, True), x, y),
           "skip_compute 0.4 pad 16": _step(drop_path_model(bare, x, 0.4, True, 16), x, y)}
    # warm: every batch size the padding allows seen before the timing (the first steps are
    # test_droppath_first_steps')
    med = _timed(fns, reps=3, budget_s=8.0, min_rounds=11, max_rounds=30, warmup=12)
    note = "; ".join(f"{k}: {med[k] / med['bare']:.3f}x bare" for k in fns if k != "bare")
    record(benchmark, f"CUDA {name} train step, batch {batch}, 224 px, bf16, warm", med,
           subject="skip_compute 0.4", note=note)
    benchmark.pedantic(fns["skip_compute 0.4"], rounds=2, iterations=1)


@pytest.mark.parametrize("name", ["convnext_tiny", "vit_base_patch16_224"])
def test_droppath_first_steps(benchmark, name):
    """The first 20 steps (batch 64, 224 px, bf16), each setting in a fresh process:
    ``DropPath(skip_compute=True)`` at 0 to 0.4 by depth, with its default padding, against
    the bare model. A new batch size costs cuDNN seconds at first, which the padding bounds."""
    import subprocess
    import sys
    script = os.path.join(os.path.dirname(__file__), "_first_steps.py")
    steps = {}
    for setting in ("bare", "skip"):
        out = subprocess.run([sys.executable, script, name, setting, "20"], check=True,
                             capture_output=True, text=True, timeout=240).stdout
        steps[setting] = json.loads(out.strip().splitlines()[-1])
    med = {"skip_compute 0.4": sum(steps["skip"]), "bare": sum(steps["bare"])}
    note = "; ".join(f"{k} steps 1-5 (ms): " + ", ".join(f"{t * 1e3:.0f}" for t in v[:5])
                     for k, v in steps.items())
    record(benchmark, f"CUDA {name} first 20 steps (sum), fresh process", med,
           subject="skip_compute 0.4", note=note)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


def test_compiled_dropblock_forward(benchmark):
    """One torch.compile graph for a scheduled DropBlock against compiled ``x * x``."""
    x = torch.randn(32, 1024, 14, 14, device="cuda", dtype=torch.bfloat16)
    ours = _attached(pd.DropBlock(pd.linear(0.0, P, steps=100), block_size=7))
    eager = _attached(pd.DropBlock(P, block_size=7))
    compiled = torch.compile(ours)
    square = torch.compile(lambda t: t * t)
    fns = {"plugdrop": lambda: compiled(x), "plugdrop eager": lambda: eager(x),
           "x*x compiled": lambda: square(x)}
    med = _timed(fns, reps=20, budget_s=2.0, min_rounds=11, max_rounds=40, warmup=3)
    record(benchmark, "CUDA compiled DropBlock fwd (scheduled) 32x1024x14x14 bf16", med)
    benchmark.pedantic(fns["plugdrop"], rounds=3, iterations=1)

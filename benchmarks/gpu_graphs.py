"""CUDA graphs and host time, one line per figure (what ``benchmarks/gpu_session.sh`` runs on a
lent GPU; on a machine without one, the host times on the CPU and the graph checks skipped):

- ``graph replay``: each attached transform (and torch's ``nn.Dropout``) on an identity layer,
  its forward and backward captured once in ``torch.cuda.graph`` and replayed three times:
  whether each replay drew a new mask, the dropped fraction, whether ``torch.manual_seed``
  before the replays reproduces them;
- ``reduce-overhead``: a small conv net with DropBlock (scheduled), Dropout2d, GaussianNoise
  and a shared-channel DropBlock, ``torch.compile(mode="reduce-overhead")``, trained 6 steps;
  then an attached DropBlock alone: a new mask each step, and its scheduled ``p`` followed;
- ``host time``: torch.profiler's host time of one hooked forward + backward (the transform on
  an identity layer, the loss a sum) above the bare module, beside ``nn.Dropout`` in the same
  spot, and the device time of the kernels per call.

    python3 benchmarks/gpu_graphs.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

import plugdrop as pd

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"

TRANSFORMS: dict[str, Callable[[], Any]] = {
    "DropBlock(0.2, 3)": lambda: pd.DropBlock(0.2, 3),
    "DropBlock(0.2, 3, shared)": lambda: pd.DropBlock(0.2, 3, shared_channels=True),
    "Dropout2d(0.2)": lambda: pd.Dropout2d(0.2),
    "DropPath(0.2)": lambda: pd.DropPath(0.2),
    "GaussianNoise(0.5)": lambda: pd.GaussianNoise(0.5),
}


def _line(text: str) -> None:
    print(text, flush=True)


def _model(name: str | None) -> nn.Module:
    """An identity layer with ``name``'s transform attached (None: bare; "nn.Dropout":
    torch's own dropout after it)."""
    if name == "nn.Dropout":
        return nn.Sequential(nn.Identity(), nn.Dropout(0.2)).to(DEVICE).train()
    m = nn.Sequential(nn.Identity()).to(DEVICE).train()
    if name is not None:
        pd.attach(m, "0", TRANSFORMS[name]())
    return m


# ------------------------------------------------------------------------- graph replay

def graph_replay(name: str) -> None:
    m = _model(name)
    x = torch.randn(64, 16, 8, 8, device=DEVICE, requires_grad=True)
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
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        outs = []
        for _ in range(3):
            graph.replay()
            outs.append((y.detach().clone(), g.clone()))
        runs.append(outs)
    torch.cuda.synchronize()
    outs = runs[0]
    new = all(not torch.equal(a[0], b[0]) for a, b in zip(outs, outs[1:]))
    same_seed = all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                    for a, b in zip(runs[0], runs[1]))
    dropped = sum((o[0] == 0).float().mean().item() for o in outs) / len(outs)
    _line(f"graph replay, {name}: a new mask at each of 3 replays: {'yes' if new else 'NO'}; "
          f"dropped {dropped:.3f}; manual_seed reproduces the replays: "
          f"{'yes' if same_seed else 'NO'}")


# ---------------------------------------------------------------------- reduce-overhead

def reduce_overhead_trains() -> None:
    torch._dynamo.reset()
    m = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1),
                      nn.Identity(), nn.Conv2d(32, 8, 1)).to(DEVICE).train()
    handles = [pd.attach(m, "0", pd.DropBlock(pd.linear(0.1, 0.3, steps=4), 3)),
               pd.attach(m, "1", pd.Dropout2d(0.1)), pd.attach(m, "2", pd.GaussianNoise(0.1)),
               pd.attach(m, "3", pd.DropBlock(0.2, 3, shared_channels=True))]
    cm = torch.compile(m, mode="reduce-overhead")
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x = torch.randn(16, 16, 14, 14, device=DEVICE)
    losses = []
    for _ in range(6):
        torch.compiler.cudagraph_mark_step_begin()
        loss = cm(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        for h in handles:
            h.step()
        losses.append(loss.item())
    ok = all(torch.isfinite(torch.tensor(losses)))
    _line(f"reduce-overhead, conv net with DropBlock (scheduled), Dropout2d, GaussianNoise, "
          f"shared DropBlock: trained 6 steps: {'yes' if ok else 'NO'} "
          f"(losses {losses[0]:.4f} .. {losses[-1]:.4f})")
    torch._dynamo.reset()


def reduce_overhead_masks() -> None:
    torch._dynamo.reset()
    m = nn.Sequential(nn.Identity()).to(DEVICE).train()
    h = pd.attach(m, "0", pd.DropBlock(pd.linear(0.2, 0.4, steps=1), 3))
    cm = torch.compile(m, mode="reduce-overhead")
    x = torch.ones(64, 16, 12, 12, device=DEVICE)
    outs = []
    for step in range(5):
        if step == 4:
            h.step()
        torch.compiler.cudagraph_mark_step_begin()
        outs.append(cm(x).clone())
    dropped = [(o == 0).float().mean().item() for o in outs]
    new = all(not torch.equal(a == 0, b == 0) for a, b in zip(outs[:3], outs[1:4]))
    _line(f"reduce-overhead, DropBlock alone: a new mask each step: {'yes' if new else 'NO'}; "
          f"dropped at p 0.2: {', '.join(f'{d:.3f}' for d in dropped[:4])}; after the "
          f"schedule's step to p 0.4: {dropped[4]:.3f}")
    torch._dynamo.reset()


# ----------------------------------------------------------------------------- host time

def _times(m: nn.Module, x: torch.Tensor, calls: int) -> tuple[float, float]:
    """Host time (us, the median call) of one forward + backward of ``m`` on ``x`` and the
    device time of the kernels it launches (us, the mean per call), from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile, record_function

    def step() -> None:
        with record_function("plugdrop_step"):
            m(x).sum().backward()

    for _ in range(10):
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
    with profile(activities=activities) as prof:
        for _ in range(calls):
            step()
        if CUDA:
            torch.cuda.synchronize()
    hosts, device = [], 0.0
    for e in prof.events():
        kind = str(getattr(e, "device_type", ""))
        if e.name == "plugdrop_step" and "CPU" in kind:
            hosts.append(e.time_range.elapsed_us())
        elif "CUDA" in kind and e.name != "plugdrop_step":
            device += getattr(e, "device_time", getattr(e, "cuda_time", 0.0))
    return statistics.median(hosts) if hosts else float("nan"), device / calls


def host_time(shape: tuple[int, ...], dtype: torch.dtype, calls: int) -> None:
    x = torch.randn(shape, device=DEVICE, dtype=dtype, requires_grad=True)
    where = f"{'x'.join(map(str, shape))} {str(dtype).replace('torch.', '')} on {DEVICE}"
    bare, bare_dev = _times(_model(None), x, calls)
    _line(f"host time, bare identity + sum, {where}: host {bare:.1f} us, device "
          f"{bare_dev:.1f} us per forward + backward")
    for name in ["nn.Dropout", *TRANSFORMS]:
        host, dev = _times(_model(name), x, calls)
        _line(f"host time, {name}, {where}: +{host - bare:.1f} us host above the bare module "
              f"({host:.1f} us), kernels {dev - bare_dev:.1f} us on the device per forward + "
              f"backward")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer profiled calls")
    args = parser.parse_args(argv)
    _line(f"torch {torch.__version__}, device {torch.cuda.get_device_name() if CUDA else 'cpu'}")
    failed = 0
    checks: list[tuple[str, Callable[[], None]]] = []
    if CUDA:
        checks += [(f"graph replay, {n}", lambda n=n: graph_replay(n))
                   for n in ["nn.Dropout", *TRANSFORMS]]
        checks += [("reduce-overhead trains", reduce_overhead_trains),
                   ("reduce-overhead masks", reduce_overhead_masks)]
    else:
        _line("graph replay and reduce-overhead: skipped (no CUDA device)")
    calls = 10 if args.quick else 50
    shapes = [((2, 4, 8, 8), torch.float32)]
    if CUDA:
        shapes += [((32, 1024, 14, 14), torch.bfloat16), ((64, 256, 56, 56), torch.bfloat16)]
    checks += [(f"host time {s}", lambda s=s, d=d: host_time(s, d, calls)) for s, d in shapes]
    for what, check in checks:
        try:
            check()
        except Exception as e:  # one figure failing must not hide the others
            failed += 1
            first = (str(e).strip().splitlines() or [""])[0][:300]
            _line(f"{what}: FAILED ({type(e).__name__}: {first})")
            traceback.print_exc(file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

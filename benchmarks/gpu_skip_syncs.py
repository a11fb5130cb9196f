"""The host syncs and copies per training step of stochastic depth with ``skip_compute`` (issue
56, items 3 and 7), and the warm step time against the bare model:

    python benchmarks/gpu_skip_syncs.py            # on a GPU: ConvNeXt-T, batch 64, bf16
    python benchmarks/gpu_skip_syncs.py --cpu      # the same script, small, on the CPU (a check
                                                   # of the script, not of a GPU's figures)

For each setting (``bare``; ``plain``: DropPath 0 to 0.4 by depth; ``skip``: the same with
``skip_compute=True`` under its rule for when skipping pays; ``skip-all``: skipping every
branch, ``min_dropped=0``), torch.profiler counts per step what makes the host wait for the
device or copies on it: ``aten::nonzero`` and ``aten::_local_scalar_dense`` (``item``,
``bool``), ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize``, ``cudaMemcpyAsync`` and the
copies by direction (``Memcpy HtoD/DtoH/DtoD``). Then the warm step time of each setting
(interleaved rounds, medians) and its ratio to the bare step. Without a GPU (and without
``--cpu``) it prints one line and exits 0. timm's model, ``pretrained=False``.
"""

from __future__ import annotations

import argparse
import collections
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import plugdrop as pd  # noqa: E402

#: the profiler's event names that are syncs or copies (a prefix matches, "Memcpy HtoD ...")
WATCHED = ("aten::nonzero", "aten::_local_scalar_dense", "cudaStreamSynchronize",
           "cudaDeviceSynchronize", "cudaMemcpyAsync", "Memcpy HtoD", "Memcpy DtoH",
           "Memcpy DtoD")


def build(name: str, x: torch.Tensor, device: torch.device) -> dict[str, torch.nn.Module]:
    import timm

    torch.manual_seed(0)
    bare = timm.create_model(name, pretrained=False).to(device).train()
    models = {"bare": bare}
    for setting, kw in (("plain", {}), ("skip", {"skip_compute": True}),
                        ("skip-all", {"skip_compute": True, "min_dropped": 0})):
        m = copy.deepcopy(bare)
        pd.residual_branches(m, x[:2])
        pd.attach(m, "residual:", pd.DropPath(pd.by_depth(0.0, 0.4, by="parent"), **kw))
        models[setting] = m.train()
    return models


def stepper(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, dtype: torch.dtype):
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(x.device.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return step


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def counted(step, device: torch.device, steps: int) -> dict[str, float]:
    """The watched events per step of ``steps`` profiled steps."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        sync(device)
    counts: collections.Counter[str] = collections.Counter()
    for event in prof.events():
        for name in WATCHED:
            if event.name.startswith(name):
                counts[event.name if name.startswith("Memcpy") else name] += 1
    return {k: v / steps for k, v in sorted(counts.items())}


def timed(steps: dict, device: torch.device, rounds: int) -> dict[str, float]:
    """Median seconds per step of each setting, one step of each per round."""
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(rounds):
        for k, step in steps.items():
            sync(device)
            start = time.perf_counter()
            step()
            sync(device)
            times[k].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true",
                        help="run small on the CPU (convnext_atto, batch 8, 32 px, fp32): a "
                             "check of the script")
    parser.add_argument("--model", default=None)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        print("gpu_skip_syncs: no CUDA device here (torch.cuda.is_available() is False): "
              "skipped; --cpu runs the script small on the CPU")
        return 0
    if args.cpu:
        device, dtype, size = torch.device("cpu"), torch.float32, 32
        name, batch, rounds = args.model or "convnext_atto", args.batch or 8, args.rounds or 2
    else:
        device, dtype, size = torch.device("cuda"), torch.bfloat16, 224
        name, batch, rounds = args.model or "convnext_tiny", args.batch or 64, args.rounds or 15
    torch.manual_seed(0)
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)
    models = build(name, x, device)
    steps = {k: stepper(m, x, y, dtype) for k, m in models.items()}
    for step in steps.values():  # warm: cuDNN's and cuBLAS's set-up of each batch size
        for _ in range(1 if args.cpu else 10):
            step()
    where = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"gpu_skip_syncs: {name}, batch {batch}, {size} px, {str(dtype)[6:]}, "
          f"DropPath 0 to 0.4 by depth; torch {torch.__version__}, {where}")
    for k, step in steps.items():
        counts = counted(step, device, 1 if args.cpu else 3)
        shown = ", ".join(f"{n} {v:g}" for n, v in counts.items()) or "none"
        print(f"  {k:9s} per step: {shown}")
    med = timed(steps, device, rounds)
    bare = med["bare"]
    print("  warm step (median of %d): " % rounds + ", ".join(
        f"{k} {v * 1e3:.2f} ms ({v / bare:.2f}x bare)" for k, v in med.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

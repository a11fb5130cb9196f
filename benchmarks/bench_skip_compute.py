"""DropPath(skip_compute=True) (issue 36): whole training steps of timm models on the CPU, each
residual branch run on its kept samples only, against the bare model and plain DropPath at the
same rates, interleaved in one process; and the fixed cost of the gather and scatter a branch
pays.

Rates rise linearly with the block's depth from 0 to the rate named (timm's
``drop_path_rate`` rule: ``by_depth(0, rate, by="parent")``), so the fraction of the branches'
compute that is dropped is about half the rate. The ratio goal of the issue: ViT-S/16 at 96 px,
batch 32, rates 0 to 0.4: a step at most 0.85x the bare step.

On a shared machine every timed call first waits for the other processes to leave the cores
idle (:class:`Quiet`; ``PLUGDROP_BENCH_NO_WAIT=1`` turns it off).
"""

from __future__ import annotations

import copy
import os
import time

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from _harness import drop_path_model, interleaved, record

timm = pytest.importorskip("timm")


class Quiet:
    """Run before every timed call (the harness's ``before``): wait until the machine's other
    processes leave both cores idle (at least ``idle`` of the CPU time idle over ``window``
    seconds, read from /proc/stat, at most ``timeout`` seconds), so that a shared machine's
    other work lands between calls, not inside them. ``waited`` and ``busy`` (calls that ran
    after a timeout) are recorded with the results. A no-op without /proc/stat."""

    def __init__(self, idle: float = 0.9, window: float = 0.25, timeout: float = 30.0) -> None:
        self.idle, self.window, self.timeout = idle, window, timeout
        self.waited, self.busy = 0.0, 0
        self.enabled = os.path.exists("/proc/stat") and not os.environ.get(
            "PLUGDROP_BENCH_NO_WAIT")

    @staticmethod
    def _cpu() -> tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return values[3] + values[4], sum(values)  # idle + iowait, total

    def __call__(self) -> None:
        if not self.enabled:
            return
        start = time.monotonic()
        while True:
            idle0, total0 = self._cpu()
            time.sleep(self.window)
            idle1, total1 = self._cpu()
            if (idle1 - idle0) >= self.idle * max(total1 - total0, 1):
                break
            if time.monotonic() - start > self.timeout:
                self.busy += 1
                break
        self.waited += time.monotonic() - start

    def info(self) -> str:
        return (f"each call waited for idle cores ({self.waited:.0f} s in all; {self.busy} "
                f"call(s) ran on a busy machine after {self.timeout:.0f} s)")


def _step(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

    def run() -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return run


def _dropped(model: nn.Module, rate: float) -> float:
    """The mean rate over the model's residual branches: the fraction of their samples
    dropped, so of their compute skipped."""
    h = pd.handles(model)[0]
    values = [h.transform.values(layer)["p"] for layer in h.layers]
    return sum(values) / len(values)


def _compare(benchmark, case: str, name: str, size: int, batch: int, rates: list[float],
             plain_at: float | None, rounds: int, **kwargs: object) -> None:
    torch.manual_seed(0)
    bare = timm.create_model(name, pretrained=False, num_classes=100, **kwargs).train()
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, 100, (batch,))
    fns = {"bare": _step(bare, x, y)}
    if plain_at is not None:
        fns[f"plain DropPath {plain_at}"] = _step(drop_path_model(bare, x, plain_at, False), x, y)
    dropped = {}
    for rate in rates:
        model = drop_path_model(bare, x, rate, True)
        dropped[rate] = _dropped(model, rate)
        fns[f"skip_compute {rate}"] = _step(model, x, y)
    quiet = Quiet()
    med = interleaved(fns, budget_s=1.0, min_rounds=rounds, max_rounds=rounds, before=quiet)
    subject = f"skip_compute {rates[-1]}"
    notes = [f"rates 0 to {r}: {med[f'skip_compute {r}'] / med['bare']:.3f}x bare "
             f"(branch compute dropped {dropped[r]:.3f})" for r in rates]
    if plain_at is not None:
        plain = med[f"plain DropPath {plain_at}"]
        notes.append(f"plain DropPath {plain_at}: {plain / med['bare']:.3f}x bare")
    record(benchmark, case, med, subject=subject, note="; ".join(notes + [quiet.info()]))
    benchmark.pedantic(fns[subject], rounds=1, iterations=1)


def test_vit_small_train_step(benchmark):
    """The issue's goal: ViT-S/16, 96 px, batch 32, rates 0 to 0.4."""
    _compare(benchmark, "skip_compute: vit_small_patch16_224 train step, 96 px, batch 32",
             "vit_small_patch16_224", 96, 32, [0.4], 0.4, rounds=21, img_size=96)


def test_vit_base_train_step(benchmark):
    _compare(benchmark, "skip_compute: vit_base_patch16_224 train step, 64 px, batch 16",
             "vit_base_patch16_224", 64, 16, [0.1, 0.2, 0.4], 0.4, rounds=9, img_size=64)


def test_convnext_train_step(benchmark):
    _compare(benchmark, "skip_compute: convnext_tiny train step, 64 px, batch 32",
             "convnext_tiny", 64, 32, [0.1, 0.2, 0.4], 0.4, rounds=9)


class _Scaled(nn.Module):
    """A residual block whose branch costs almost nothing (a per-channel scale), entry and
    exit in one module: what skip_compute adds to a branch is what remains."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.f = _Scale(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.f(x)


class _Scale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


def test_gather_scatter_cost_per_branch(benchmark):
    """Forward and backward of one near-free branch on ViT-S's stream at 96 px (32 x 37 x
    384): bare, plain DropPath, skip_compute (its hooks, draw, gather and scatter), p = 0.2."""
    torch.manual_seed(0)
    x = torch.randn(32, 37, 384, requires_grad=True)
    g = torch.randn(32, 37, 384)
    models = {"bare": _Scaled(384).train()}
    for label, skip in (("plain DropPath", False), ("skip_compute", True)):
        m = copy.deepcopy(models["bare"])
        pd.residual_branches(m, x[:2].detach())
        pd.attach(m, "residual:", pd.DropPath(0.2, skip_compute=skip))
        models[label] = m

    def run(m: nn.Module):
        def f() -> None:
            m(x).backward(g)
        return f
    quiet = Quiet(window=0.05)
    med = interleaved({k: run(m) for k, m in models.items()}, budget_s=3.0, min_rounds=80,
                      max_rounds=80, before=quiet)
    extra = (med["skip_compute"] - med["bare"]) * 1e6
    record(benchmark, "skip_compute: one branch's gather + scatter, fwd+bwd, 32x37x384, p=0.2",
           med, subject="skip_compute",
           note=f"skip_compute adds {extra:.0f} us per branch and step to the bare branch "
                f"(plain DropPath adds {(med['plain DropPath'] - med['bare']) * 1e6:.0f} us); "
                f"{quiet.info()}")
    benchmark.pedantic(run(models["skip_compute"]), rounds=5, iterations=1)

"""Where per-channel DropBlock's forward time goes: the fused C kernel called directly (its
call prepared once, as a cached plan runs it: a ``torch.empty`` and one foreign call),
against torch's ``x * x``, interleaved in one process, at the shapes where it is furthest
from ``x * x``:

- ``kernel``: the real call (p = 0.1), with a new key each call as in training (a repeated key
  repeats every branch of the draws, which the CPU learns to predict);
- ``kernel, no seeds``: the same call with a seed probability of 0 (the generator draws nothing;
  the bit-array work and the masked pass still run, and nothing is dropped);
- ``x * x``: the floor of any transform that is not in place (4 bytes read and 4 written per
  float32 element, as the kernel; a new output tensor each call, as the kernel's).

The difference between the first two is the cost of the seeds; the second against ``x * x`` is
the cost of the bit arrays and the masked pass.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from _harness import interleaved, record
from plugdrop._kernels import cext, geometry

CASES = [((32, 2048, 7, 7), 3), ((32, 2048, 7, 7), 7), ((16, 384, 14, 14), 3),
         ((16, 512, 28, 28), 3), ((8, 64, 112, 112), 3)]


def _call(x: torch.Tensor, gamma: float, scale: torch.Tensor, blocks: tuple[int, ...]):
    call = cext.prepare(x, scale, cext.thresholds(gamma), blocks)  # as a cached plan runs it
    assert call is not None
    keys = itertools.count(12345)
    return lambda: call(x, next(keys), 678)


@pytest.mark.skipif(cext.library() is None, reason="no C compiler here")
@pytest.mark.parametrize("shape,block", CASES, ids=lambda v: "x".join(map(str, v))
                         if isinstance(v, tuple) else str(v))
def test_kernel_breakdown(benchmark, shape, block):
    x = torch.randn(shape)
    sizes = shape[2:]
    blocks = (block,) * len(sizes)
    q = geometry.solve_keep(0.1, sizes, blocks)
    scale = geometry.scale_map(q, sizes, blocks, x.device, torch.float32)
    scale = scale.expand(sizes).contiguous()
    fns = {"kernel": _call(x, 1.0 - q, scale, blocks),
           "kernel, no seeds": _call(x, 0.0, scale, blocks),
           "x*x": lambda: x * x}
    seeds = (1.0 - q) * x.shape[0] * x.shape[1] * torch.tensor(
        [s - b + 1 for s, b in zip(sizes, blocks)]).prod().item()
    medians = interleaved(fns)
    note = (f"seeds per element {seeds / x.numel():.4f}; cost per seed "
            f"{(medians['kernel'] - medians['kernel, no seeds']) / max(seeds, 1) * 1e9:.1f} ns")
    record(benchmark, f"kernel alone, block {block} {'x'.join(map(str, shape))}", medians,
           subject="kernel", note=note)
    benchmark.pedantic(fns["kernel"], rounds=3, iterations=1)

"""The first steps of one timm model in a fresh process (cuDNN's and cuBLAS's per-shape set-up
is process-wide, so each row of ``bench_cuda.test_droppath_first_steps`` starts its own):
``python benchmarks/_first_steps.py MODEL SETTING STEPS`` prints the seconds of each step,
synchronized, as a JSON list. SETTING: ``bare``, ``plain`` (DropPath 0 to 0.4 by depth) or
``skip`` (the same with ``skip_compute=True`` and its default padding). Batch 64, 224 px, bf16
autocast, SGD."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))


def main(name: str, setting: str, steps: int) -> None:
    import timm

    from _harness import drop_path_model

    torch.manual_seed(0)
    x = torch.randn(64, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")
    model = timm.create_model(name, pretrained=False).cuda().train()
    if setting != "bare":
        model = drop_path_model(model, x, 0.4, setting == "skip")
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    print(json.dumps(times))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))

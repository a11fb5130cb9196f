"""What a verified, atomic checkpoint costs: the runner's writer (``write_checkpoint``:
serialize in memory, write a temporary file, fsync, read back, compare, load as data, rename
over the previous one) against a plain ``torch.save`` to the same folder, interleaved, for
resnet18 and resnet50 with their SGD momentum state. Ratio = writer / torch.save."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _harness import interleaved, record


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_verified_checkpoint_write(benchmark, tmp_path: Path, name: str) -> None:
    import timm

    from plugdrop.ablate.runs.files import write_checkpoint

    model = timm.create_model(name, pretrained=False, num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 1}
    ours, plain = tmp_path / "checkpoint.pt", tmp_path / "plain.pt"

    fns = {
        "plugdrop": lambda: write_checkpoint(ours, state, tmp_path / "checkpoint.prev.pt"),
        "torch.save": lambda: torch.save(state, plain),
    }
    med = interleaved(fns, budget_s=10.0, min_rounds=5, max_rounds=15, warmup=1)
    size = ours.stat().st_size
    record(benchmark, f"verified checkpoint write, {name} + SGD state ({size / 1e6:.0f} MB)",
           med, subject="plugdrop", baseline="torch.save",
           note=f"{size / med['plugdrop'] / 1e6:.0f} MB/s verified, "
                f"{size / med['torch.save'] / 1e6:.0f} MB/s torch.save")
    benchmark.pedantic(fns["plugdrop"], rounds=1, iterations=1)

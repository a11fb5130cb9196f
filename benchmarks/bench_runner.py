"""The runner's own cost: an epoch of ``plugdrop ablate``'s training step (a baseline run of the
demo's model and data) against a hand-written loop training the same model on the same data with
the same DataLoader, optimizer and schedule, interleaved epoch by epoch. Ratio = runner / loop
(images/s of the loop over images/s of the runner; 1.05 = 5% slower)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from _harness import interleaved, record

CONFIG = """\
model: resnet10t
data: digits
image_size: 32
epochs: 50
batch_size: 64
seeds: [0]
device: cpu
gradcam: false
watch: {watch}
variants:
  baseline: []
  dropblock:
    - {{layers: "layer2.*", transform: DropBlock, p: 0.1, block_size: 3}}
"""


def _runner_epoch(cfg, data):
    from plugdrop.ablate.train import Dist, Trainer

    trainer = Trainer.create(cfg, cfg.variant("baseline"), 0, data, Dist(), 0)

    def epoch() -> None:
        trainer.train_epoch()
    return epoch


def _hand_epoch(data):
    """What a user would write: timm model, SGD + Nesterov, per-step cosine, eval each epoch."""
    import timm

    from plugdrop.ablate.data import make_loader

    torch.manual_seed(0)
    model = timm.create_model("resnet10t", num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)
    steps = len(data.train) // 64
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, 50 * steps) / (50 * steps))))
    state = {"epoch": 0}
    dev = torch.device("cpu")

    def epoch() -> None:
        state["epoch"] += 1
        model.train()
        for x, y in make_loader(data.train, batch_size=64, train=True, workers=0, seed=0,
                                epoch=state["epoch"], device=dev):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        with torch.no_grad():
            for x, y in make_loader(data.val, batch_size=128, train=False, workers=0, seed=0,
                                    epoch=0, device=dev):
                out = model(x)
                F.cross_entropy(out, y, reduction="sum")
                (out.argmax(1) == y).sum()
    return epoch


@pytest.mark.parametrize("watch", ["auto", "false"])
def test_runner_epoch_vs_hand_loop(benchmark, tmp_path: Path, watch):
    from plugdrop.ablate import config as C
    from plugdrop.ablate.execute import load_data

    path = tmp_path / "cfg.yaml"
    path.write_text(CONFIG.format(watch=watch))
    cfg = C.load(path)
    data = load_data(cfg)
    fns = {"runner": _runner_epoch(cfg, data), "hand-written loop": _hand_epoch(data)}
    med = interleaved(fns, budget_s=20.0, min_rounds=3, max_rounds=6, warmup=1)
    n = len(data.train)  # type: ignore[arg-type]
    record(benchmark, f"runner baseline epoch (watch: {watch}), resnet10t digits 32px batch 64",
           med, subject="runner",
           note=f"images/s: runner {n / med['runner']:.0f}, loop "
                f"{n / med['hand-written loop']:.0f}")
    benchmark.pedantic(fns["runner"], rounds=1, iterations=1)

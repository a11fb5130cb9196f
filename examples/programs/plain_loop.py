"""A plain PyTorch training loop that is also a ``plugdrop ablate`` program.

Run on its own it trains a small CNN on scikit-learn's bundled digits (no download) and prints
its validation accuracy. Run by ``plugdrop ablate examples/programs/plain_loop.yaml`` it takes
the run's seed, attaches the run's variant to the model (``run.attach``), keeps its checkpoint
in the run's own folder, resumes from it when the run was interrupted, and logs its metrics
into the run (``run.log``), which the ablation decides on. Nothing else of the loop changes.

    python examples/programs/plain_loop.py --epochs 3
    plugdrop ablate examples/programs/plain_loop.yaml --out runs/plain
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits

import plugdrop as pd


def make_model() -> nn.Module:
    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())

    return nn.Sequential(block(1, 16), block(16, 32), nn.MaxPool2d(2), block(32, 32),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0, help="when run on its own")
    args = p.parse_args()

    run = pd.current_run()  # None when the script runs on its own
    seed = run.seed if run else args.seed
    torch.manual_seed(seed)  # the same seed: the same initial weights and data order

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target)
    split = torch.Generator().manual_seed(0)  # one split for every run
    order = torch.randperm(len(x), generator=split)
    train, val = order[:1400], order[1400:]

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batch = 64
    steps = args.epochs * (len(train) // batch)
    group = run.attach(model, steps=steps).bind(optimizer) if run else None

    start = 1
    checkpoint = run.run_dir / "checkpoint.pt" if run else None
    if run and run.resumed and checkpoint.exists():  # an interrupted run continues
        state = torch.load(checkpoint, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        group.load_state_dict(state["plugdrop"])
        torch.set_rng_state(state["rng"])
        start = state["epoch"] + 1

    for epoch in range(start, args.epochs + 1):
        model.train()
        perm = train[torch.randperm(len(train))]
        for i in range(0, len(perm) - batch + 1, batch):
            idx = perm[i:i + batch]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(x[val])
            val_loss = F.cross_entropy(logits, y[val]).item()
            val_acc = (logits.argmax(1) == y[val]).float().mean().item()
        print(f"epoch {epoch}: val_loss {val_loss:.4f}  val_acc {val_acc:.4f}", flush=True)
        if run:
            run.log(epoch=epoch, val_loss=val_loss, val_acc=val_acc, train_loss=loss.item())
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "plugdrop": group.state_dict(), "rng": torch.get_rng_state(),
                        "epoch": epoch}, checkpoint)


if __name__ == "__main__":
    main()

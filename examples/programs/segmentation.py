"""Segmentation of generated shapes: an ablation program that is not classification, decided
on its own metric (the validation mean IoU).

Images of circles and squares on noise (made here, with a fixed seed: no download), a small
encoder-decoder network, pixel-wise cross-entropy; every epoch the validation mean IoU over the
three classes (background, circle, square) is logged into the run. Run on its own it prints the
metrics; run by ``plugdrop ablate examples/programs/segmentation.yaml`` it is one variant x seed,
its regularization attached to the encoder's layers by the ablation.

    python examples/programs/segmentation.py
    plugdrop ablate examples/programs/segmentation.yaml --out runs/shapes
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import plugdrop as pd

CLASSES = 3  # background, circle, square


def shapes(n: int, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` noisy grey images of ``size`` pixels with a circle and a square each, and their
    masks (0 background, 1 circle, 2 square)."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    images = 0.3 * torch.rand(n, 1, size, size, generator=g)
    masks = torch.zeros(n, size, size, dtype=torch.long)
    for i in range(n):
        r = int(torch.randint(3, size // 5, (1,), generator=g))
        cy, cx = (int(v) for v in torch.randint(r, size - r, (2,), generator=g))
        circle = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        s = int(torch.randint(4, size // 4, (1,), generator=g))
        top, left = (int(v) for v in torch.randint(0, size - s, (2,), generator=g))
        square = (yy >= top) & (yy < top + s) & (xx >= left) & (xx < left + s)
        masks[i][circle] = 1
        masks[i][square] = 2
        images[i, 0][circle] += 0.5
        images[i, 0][square] += 0.7
    return images, masks


def block(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.ReLU())


class SegNet(nn.Module):
    """A small encoder-decoder: ``encoder.0 .. encoder.2`` (the last two at half resolution),
    ``decoder``, a 1x1 ``head``."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(block(1, 8), block(8, 16, stride=2), block(16, 16))
        self.decoder = nn.Sequential(nn.Upsample(scale_factor=2), block(16, 8))
        self.head = nn.Conv2d(8, CLASSES, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.decoder(self.encoder(x)))


def mean_iou(pred: torch.Tensor, target: torch.Tensor) -> float:
    ious = []
    for c in range(CLASSES):
        inter = ((pred == c) & (target == c)).sum().item()
        union = ((pred == c) | (target == c)).sum().item()
        if union:
            ious.append(inter / union)
    return sum(ious) / len(ious)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--images", type=int, default=128)
    p.add_argument("--size", type=int, default=24)
    p.add_argument("--seed", type=int, default=0, help="when run on its own")
    args = p.parse_args()

    run = pd.current_run()  # None on its own
    x, y = shapes(args.images + 64, args.size, seed=1234)  # the same data for every run
    x_train, y_train, x_val, y_val = x[:args.images], y[:args.images], x[args.images:], \
        y[args.images:]
    torch.manual_seed(run.seed if run else args.seed)
    model = SegNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batch = 16
    if run:
        run.attach(model, steps=args.epochs * (len(x_train) // batch)).bind(optimizer)
    for epoch in range(1, args.epochs + 1):
        model.train()
        perm = torch.randperm(len(x_train))
        for i in range(0, len(perm) - batch + 1, batch):
            idx = perm[i:i + batch]
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(x_val)
            val_loss = F.cross_entropy(logits, y_val).item()
            pred = logits.argmax(1)
            miou = mean_iou(pred, y_val)
            pixel_acc = (pred == y_val).float().mean().item()
        print(f"epoch {epoch}: val_miou {miou:.4f}  val_loss {val_loss:.4f}", flush=True)
        if run:  # what the ablation decides on, and curves of the rest
            run.log(epoch=epoch, val_miou=miou, val_loss=val_loss, val_pixel_acc=pixel_acc,
                    train_loss=loss.item())


if __name__ == "__main__":
    main()

"""A training script in the style of timm's ``train.py`` that knows nothing of plugdrop:
argparse, ``timm.create_model``, ``timm.optim.create_optimizer_v2``, a ``summary.csv`` written
by ``timm.utils.update_summary``, a ``last.pth.tar`` checkpoint and ``--resume``. It trains on
scikit-learn's bundled digits (no download).

``plugdrop ablate examples/programs/timm_style.yaml`` ablates it unedited: ``attach_to:``
attaches each run's variant to the model ``create_model`` returns, ``metrics_from:`` reads
``summary.csv``, ``resume_args:`` resumes an interrupted run from its ``last.pth.tar``.

    python examples/programs/timm_style.py --output runs/alone --epochs 2
"""

import argparse
import os
import time

import timm
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from timm.optim import create_optimizer_v2
from timm.utils import update_summary


def main() -> None:
    p = argparse.ArgumentParser(description="timm-style training on digits")
    p.add_argument("--model", default="resnet10t")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--img-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--output", default="output")
    p.add_argument("--experiment", default="train")
    p.add_argument("--resume", default="", help="a last.pth.tar to continue from")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.interpolate(x, size=args.img_size, mode="bilinear", align_corners=False)
    y = torch.tensor(digits.target)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))  # one split
    train, val = order[:1400], order[1400:]

    model = timm.create_model(args.model, pretrained=False, num_classes=10, in_chans=1)
    optimizer = create_optimizer_v2(model, opt="sgd", lr=args.lr, momentum=0.9,
                                    weight_decay=5e-4)
    out = os.path.join(args.output, args.experiment)
    os.makedirs(out, exist_ok=True)
    start = 0
    if args.resume:
        state = torch.load(args.resume, map_location="cpu", weights_only=True)
        model.load_state_dict(state["state_dict"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        start = state["epoch"] + 1
        print(f"resumed from {args.resume} at epoch {start}", flush=True)

    for epoch in range(start, args.epochs):
        t0 = time.time()
        model.train()
        perm = train[torch.randperm(len(train))]
        losses = []
        for i in range(0, len(perm) - args.batch_size + 1, args.batch_size):
            idx = perm[i:i + args.batch_size]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            logits = model(x[val])
        top5 = logits.topk(5, dim=1).indices
        eval_metrics = {"loss": F.cross_entropy(logits, y[val]).item(),
                        "top1": 100.0 * (top5[:, 0] == y[val]).float().mean().item(),
                        "top5": 100.0 * (top5 == y[val][:, None]).any(1).float().mean().item()}
        train_metrics = {"loss": sum(losses) / len(losses)}
        update_summary(epoch, train_metrics, eval_metrics, os.path.join(out, "summary.csv"),
                       lr=optimizer.param_groups[0]["lr"], write_header=epoch == 0)
        torch.save({"epoch": epoch, "state_dict": model.state_dict(),
                    "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state()},
                   os.path.join(out, "last.pth.tar"))
        print(f"epoch {epoch}: eval_top1 {eval_metrics['top1']:.2f} ({time.time() - t0:.1f}s)",
              flush=True)


if __name__ == "__main__":
    main()

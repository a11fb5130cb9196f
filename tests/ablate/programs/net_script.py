"""A training script of the well-known small kind, for the tests of a script ablated as it is:
it defines its model class itself (``class Net(nn.Module)``), builds it with
``Net().to(device)``, reads its data from a relative path (``data/shapes.pt``, made on its first
run), prints ``Test set: Average loss: ..., Accuracy: .../... (..%)`` after each epoch and saves
``net_cnn.pt`` in the folder it runs in with ``--save-model``. It imports nothing of plugdrop,
keeps no checkpoint, and trains a few hundred generated 8x8 images in about a second.
"""

import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 2)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.fc(torch.flatten(F.max_pool2d(x, 2), 1))


def data(path):
    """Bright squares on the left or the right half: 300 training and 100 test images."""
    if not os.path.exists(path):
        g = torch.Generator().manual_seed(1234)
        y = torch.randint(0, 2, (400,), generator=g)
        x = torch.rand(400, 1, 8, 8, generator=g)
        for i in range(400):
            col = 1 if y[i] == 0 else 5
            x[i, 0, 2:6, col:col + 2] += 0.3
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save({"x": x, "y": y}, path)
    d = torch.load(path)
    return (d["x"][:300], d["y"][:300]), (d["x"][300:], d["y"][300:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to wait after each epoch")
    p.add_argument("--save-model", action="store_true")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    (xs, ys), (xt, yt) = data(os.path.join("data", "shapes.pt"))
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(1, args.epochs + 1):
        model.train()
        order = torch.randperm(len(xs))
        for i in range(0, len(xs), 30):
            idx = order[i:i + 30]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xs[idx]), ys[idx])
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            out = model(xt)
            test_loss = F.cross_entropy(out, yt).item()
            correct = int((out.argmax(1) == yt).sum())
        print(f"Test set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{len(yt)} "
              f"({100.0 * correct / len(yt):.0f}%)", flush=True)
        time.sleep(args.sleep)
    if args.save_model:
        torch.save(model.state_dict(), "net_cnn.pt")


if __name__ == "__main__":
    main()

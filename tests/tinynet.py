"""A tiny CNN factory for fast ablation tests: ``plugdrop ablate`` loads it as
``tinynet:make`` (with this directory on PYTHONPATH)."""

import torch.nn as nn


def make(num_classes: int = 10, width: int = 8) -> nn.Module:
    def stage(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout),
                             nn.ReLU(), nn.MaxPool2d(2))

    net = nn.Sequential()
    net.add_module("layer1", stage(3, width))
    net.add_module("layer2", stage(width, 2 * width))
    net.add_module("pool", nn.AdaptiveAvgPool2d(1))
    net.add_module("flat", nn.Flatten())
    net.add_module("fc", nn.Linear(2 * width, num_classes))
    return net


class _WithSpare(nn.Module):
    """The tiny network plus a module its forward never calls (``spare``)."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body
        self.spare = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        return self.body(x)


def make_with_spare(num_classes: int = 10, width: int = 8) -> nn.Module:
    return _WithSpare(make(num_classes, width))

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


class _Float64(nn.Module):
    """A network computing in float64 between a cast of its input and of its logits back to
    float32: summation-order differences between machines (vector widths, thread counts)
    stay near 1e-16 instead of growing into float32's last bits over a training run."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body.double()

    def forward(self, x):
        return self.body(x.double()).float()


def make_float64(num_classes: int = 10, width: int = 8) -> nn.Module:
    """The tiny network of :func:`make` in float64 (its layers keep their names under
    ``body.``): the golden ablation's model."""
    return _Float64(make(num_classes, width))


def make_heavy(num_classes: int = 10, width: int = 8, megabytes: int = 96) -> nn.Module:
    """The tiny network with a large buffer its forward never reads: the same training, a
    checkpoint of about ``megabytes`` MB whose writing takes long enough to be caught midway
    (the fault tests kill a run while it writes one)."""
    import torch

    net = make(num_classes, width)
    net.register_buffer("ballast", torch.zeros(megabytes * 2 ** 18))  # float32: 4 bytes each
    return net

import math

import pytest
import torch
import torch.nn as nn


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        return x + self.act(self.bn(self.conv(x)))


class Net(nn.Module):
    """A small ResNet-like model with the usual naming (stem, layerN.M, head)."""

    def __init__(self, c=8, classes=5):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.layer1 = nn.Sequential(Block(c), Block(c))
        self.layer2 = nn.Sequential(Block(c), Block(c))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(self.pool(x).flatten(1))


@pytest.fixture
def one_thread():
    """One torch thread, as in the runner's subprocesses and every launcher's job
    (OMP_NUM_THREADS=1): the same float summation order."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def net():
    return Net()


def sigma_tol(samples: torch.Tensor, k: float = 5.0) -> float:
    """k standard errors of the mean of independent ``samples`` (floored for tiny variance)."""
    n = samples.numel()
    return k * max(samples.double().std().item(), 1e-3) / math.sqrt(n)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="store the numbers of tests/golden as the new golden ones (a "
                          "deliberate change of numbers, committed on its own with the reason)")


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))

"""GaussianNoise: the conformance suite, then its moments."""

import torch

import plugdrop as pd
from conformance import ForwardConformance


class TestGaussianNoise(ForwardConformance):
    setting = "std"

    def make(self, value):
        return pd.GaussianNoise(value)

    def multiplier(self, x, y):
        return torch.ones_like(x)  # additive noise: d(x + n)/dx = 1


class TestMultiplicativeNoise(ForwardConformance):
    setting = "std"

    def make(self, value):
        return pd.GaussianNoise(value, multiplicative=True)


def test_gaussian_noise_moments():
    x = torch.full((1000, 1000), 2.0)
    n = pd.functional.gaussian_noise(x, 0.5) - x
    assert abs(n.mean().item()) < 5 * 0.5 / 1000
    assert abs(n.std().item() - 0.5) < 0.01
    m = pd.functional.gaussian_noise(x, 0.5, multiplicative=True) / x - 1
    assert abs(m.std().item() - 0.5) < 0.01

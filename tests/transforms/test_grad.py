"""Gradient transforms: the conformance suite (hand-computed gradients on activations and on
parameters, bit-identical forward values) for each."""

import math

import torch

import plugdrop as pd
from conformance import GradientConformance


class TestClipGradValue(GradientConformance):
    setting = "clip"

    def make(self, value):
        return pd.ClipGradValue(value)

    def expected(self, g, value, per_sample):
        return g.clamp(-value, value)


class TestClipGradNorm(GradientConformance):
    setting = "max_norm"

    def make(self, value):
        return pd.ClipGradNorm(value)

    def expected(self, g, value, per_sample):
        if per_sample:
            norms = g.flatten(1).norm(dim=1).view(-1, *([1] * (g.dim() - 1)))
        else:
            norms = g.norm()
        return g * (value / (norms + 1e-6)).clamp(max=1.0)


class TestClipGradNormL1(TestClipGradNorm):
    def make(self, value):
        return pd.ClipGradNorm(value, norm_type=1.0)

    def expected(self, g, value, per_sample):
        if per_sample:
            norms = g.flatten(1).abs().sum(1).view(-1, *([1] * (g.dim() - 1)))
        else:
            norms = g.abs().sum()
        return g * (value / (norms + 1e-6)).clamp(max=1.0)


class TestScaleGrad(GradientConformance):
    setting = "factor"
    value = -0.5
    bad_value = math.inf

    def make(self, value):
        return pd.ScaleGrad(value)

    def expected(self, g, value, per_sample):
        return g * value


class TestGradNoise(GradientConformance):
    setting = "std"
    deterministic = False

    def make(self, value):
        return pd.GradNoise(value)


def test_grad_noise_adds_the_requested_spread():
    g = torch.zeros(1000, 1000)
    out = pd.GradNoise(0.5)(g)
    assert abs(out.mean().item()) < 5 * 0.5 / 1000
    assert abs(out.std().item() - 0.5) < 0.01

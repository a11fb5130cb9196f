"""Gradient transforms: the conformance suite (hand-computed gradients on activations and on
parameters, bit-identical forward values) for each."""

import math

import pytest

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


class TestClipGradAdaptive(GradientConformance):
    setting = "clip"
    where = "params"
    value = 0.05

    def make(self, value):
        return pd.ClipGradAdaptive(value)

    def expected_param(self, g, value, param):
        return _timm_agc(g, param, value, 1e-3)


def _timm_agc(g, param, clip, eps):
    """timm's adaptive_clip_grad applied to one parameter with gradient ``g``."""
    from timm.utils.agc import adaptive_clip_grad
    p = torch.nn.Parameter(param.detach().clone())
    p.grad = g.detach().clone()
    adaptive_clip_grad([p], clip_factor=clip, eps=eps)
    return p.grad


def test_clip_grad_adaptive_equals_timms_on_every_parameter_but_the_head(net):
    import copy
    x = torch.randn(4, 3, 8, 8) * 10
    ref = copy.deepcopy(net)
    ref(x).square().sum().backward()
    h = pd.attach(net, "", pd.ClipGradAdaptive(0.01, 1e-3), where="params", exclude="fc")
    net(x).square().sum().backward()
    clipped = 0
    for (name, p), (_, q) in zip(net.named_parameters(), ref.named_parameters()):
        want = q.grad if name.startswith("fc.") else _timm_agc(q.grad, q, 0.01, 1e-3)
        assert torch.allclose(p.grad, want, rtol=1e-5, atol=1e-7), name
        clipped += not torch.equal(want, q.grad)
    assert clipped >= 4  # the bound is active on several parameters
    assert "fc" not in h.layers


def test_parameter_only_transforms_refuse_activations():
    import torch.nn as nn
    for t in (pd.ClipGradAdaptive(), pd.CentralizeGrad()):
        with pytest.raises(pd.AttachError, match="where='params'"):
            pd.attach(nn.Sequential(nn.Linear(2, 2)), "0", t)
        with pytest.raises(TypeError, match="where='params'"):
            t(torch.randn(2, 2))


class TestCentralizeGrad(GradientConformance):
    setting = "strength"
    where = "params"
    value = 0.5

    def make(self, value):
        return pd.CentralizeGrad(value)

    def expected_param(self, g, value, param):
        return g - value * g.mean(dim=tuple(range(1, g.dim())), keepdim=True)


def test_centralized_conv_and_linear_weights_have_zero_mean_per_unit(net):
    pd.attach(net, ["stem", "fc"], pd.CentralizeGrad(), where="params")
    net(torch.randn(2, 3, 8, 8)).sum().backward()
    for w in (net.stem.weight, net.fc.weight):
        assert w.grad.abs().max() > 1e-4
        assert torch.allclose(w.grad.flatten(1).mean(1), torch.zeros(w.shape[0]), atol=1e-6)
    assert torch.equal(net.fc.bias.grad, torch.full_like(net.fc.bias, 2.0))  # left alone


class TestClipGradNormInf(TestClipGradNorm):
    def make(self, value):
        return pd.ClipGradNorm(value, norm_type=math.inf)

    def expected(self, g, value, per_sample):
        if per_sample:
            norms = g.flatten(1).abs().amax(1).view(-1, *([1] * (g.dim() - 1)))
        else:
            norms = g.abs().max()
        return g * (value / (norms + 1e-6)).clamp(max=1.0)

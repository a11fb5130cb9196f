"""Manifold Mixup and feature-level CutMix: exact arithmetic, one layer per forward, target
mixing, eval identity, schedules, and an ablation variant end to end."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import plugdrop as pd


class Probe(nn.Module):
    """Identity that remembers what it received and returned (outputs after hooks are seen by
    the next layer's input)."""

    def forward(self, x):
        return x


def _model():
    torch.manual_seed(0)
    return nn.Sequential(Probe(), nn.Linear(4, 4), Probe(), nn.Linear(4, 3))


def test_mixup_arithmetic_and_one_layer_per_forward():
    m = _model().train()
    h = pd.attach(m, ["", "0", "2"], pd.ManifoldMixup(alpha=1.0))
    x = torch.randn(6, 4)
    seen = {}
    for _ in range(30):
        with pd.capture(m, ["1", "3"], what="input") as inputs:
            m(x)
        layer, lam, index = h.layer, h.lam, h.index
        assert layer in ("", "0", "2") and 0.0 <= lam <= 1.0
        seen[layer] = seen.get(layer, 0) + 1
        # by hand: only the chosen layer's output is mixed
        h1_in = x if layer not in ("", "0") else lam * x + (1 - lam) * x[index]
        assert torch.allclose(inputs["1"], h1_in, atol=1e-6)
        h3_in = m[1](h1_in)
        if layer == "2":
            h3_in = lam * h3_in + (1 - lam) * h3_in[index]
        assert torch.allclose(inputs["3"], h3_in, atol=1e-6)
    assert set(seen) == {"", "0", "2"}  # every layer (the input too) gets picked


def test_loss_mixes_targets_hard_and_soft():
    m = _model().train()
    h = pd.attach(m, "2", pd.ManifoldMixup(alpha=0.4))
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    logits = m(x)
    lam, idx = h.lam, h.index
    expect = lam * F.cross_entropy(logits, y) + (1 - lam) * F.cross_entropy(logits, y[idx])
    assert torch.allclose(h.loss(F.cross_entropy, logits, y), expect)
    soft = F.one_hot(y, 3).float()
    assert torch.allclose(h.loss(F.cross_entropy, logits, soft), expect, atol=1e-6)


def test_eval_identity_and_no_mixing_settings():
    m = _model()
    ref = m(torch.ones(3, 4))
    h = pd.attach(m, ["", "2"], pd.ManifoldMixup(alpha=2.0))
    m.eval()
    x = torch.randn(5, 4)
    assert torch.equal(m(x), nn.Sequential(*m)(x)) and h.layer is None
    y = torch.randint(0, 3, (5,))
    assert torch.equal(h.loss(F.cross_entropy, m(x), y), F.cross_entropy(m(x), y))
    h.remove()
    for t in (pd.ManifoldMixup(alpha=0.0), pd.ManifoldMixup(prob=0.0)):
        h = pd.attach(m, "2", t)
        m.train()(x)
        assert h.lam is None
        h.remove()
    assert torch.equal(m.eval()(torch.ones(3, 4)), ref)


def test_probability_and_alpha_schedules():
    m = _model().train()
    h = pd.attach(m, "2", pd.ManifoldMixup(alpha=pd.linear(0.0, 1.0, steps=10),
                                            prob=pd.linear(0.0, 1.0, steps=10)))
    m(torch.randn(4, 4))
    assert h.lam is None  # step 0: alpha = 0, prob = 0
    h.step(10)
    mixed = 0
    for _ in range(10):
        m(torch.randn(4, 4))
        mixed += h.lam is not None
    assert mixed == 10


@pytest.mark.parametrize("layout", [None, "channels_last"])
def test_cutmix_box_and_lambda(layout):
    torch.manual_seed(1)
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
    if layout == "channels_last":
        x = x.permute(0, 2, 3, 1).contiguous()
    index = torch.tensor([1, 0])
    out, lam = pd.functional.cutmix(x, 0.75, index, layout=layout)
    maps = out if layout is None else out.permute(0, 3, 1, 2)
    src = x if layout is None else x.permute(0, 3, 1, 2)
    from_other = (maps == src[index])
    kept = (maps == src)
    assert torch.equal(from_other | kept, torch.ones_like(kept))
    box = from_other[0, 0]
    assert box.any() and abs((1 - box.float().mean().item()) - lam) < 1e-9
    rows, cols = box.any(1).nonzero(), box.any(0).nonzero()
    assert box[rows.min():rows.max() + 1, cols.min():cols.max() + 1].all()  # a rectangle
    assert torch.equal(from_other[:, 0:1].expand_as(from_other), from_other)  # same box per channel


def test_cutmix_mode_through_attach():
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 2, 1)).train()
    h = pd.attach(m, "0", pd.ManifoldMixup(alpha=1.0, mode="cutmix"))
    m(torch.randn(4, 3, 8, 8))
    assert h.layer == "0" and 0.0 <= h.lam <= 1.0


def test_mixup_errors():
    with pytest.raises(ValueError, match="mode"):
        pd.ManifoldMixup(mode="mix")
    with pytest.raises(ValueError, match=r"prob must be in \[0, 1\]"):
        pd.ManifoldMixup(prob=1.5)
    with pytest.raises(ValueError, match="where='output'"):
        pd.attach(_model(), "2", pd.ManifoldMixup(), where="input")
    with pytest.raises(TypeError, match="through plugdrop.attach"):
        pd.ManifoldMixup()(torch.randn(2, 3))

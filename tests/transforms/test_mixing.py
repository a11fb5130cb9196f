"""Manifold Mixup and feature-level CutMix: exact arithmetic, one layer per forward, target
mixing, eval identity, schedules, and an ablation variant end to end."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import plugdrop as pd
from conformance import CoordinatedConformance
from conftest import sigma_tol


class TestManifoldMixup(CoordinatedConformance):
    def make(self, value):
        return pd.ManifoldMixup(value)


class TestManifoldMixupSometimes(CoordinatedConformance):
    setting = "prob"
    bad_value = 1.5

    def make(self, value):
        return pd.ManifoldMixup(1.0, prob=value)

    def test_handle_is_a_mixup_handle_and_loss_mixes_targets(self):
        torch.manual_seed(3)  # prob=1.0 here; the inherited test needs a mixing forward
        super().test_handle_is_a_mixup_handle_and_loss_mixes_targets()


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


def test_handles_of_a_copy_rebuild_a_mixup_handle():
    import copy

    m = _model().train()
    pd.attach(m, ["", "2"], pd.ManifoldMixup(alpha=1.0))
    pd.attach(m, "1", pd.Dropout(0.1))
    twin = copy.deepcopy(m)
    hs = pd.handles(twin)
    assert [type(h) for h in hs] == [pd.MixupHandle, pd.Handle]
    mix = hs[0]
    assert mix.layers == ["", "2"] and mix.where == "output"
    torch.manual_seed(1)
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    logits = twin(x)
    assert mix.layer in ("", "2") and mix.index is not None
    expected = (mix.lam * F.cross_entropy(logits, y)
                + (1 - mix.lam) * F.cross_entropy(logits, y[mix.index]))
    assert torch.allclose(mix.loss(F.cross_entropy, logits, y), expected)
    mix.remove()
    assert [type(h) for h in pd.handles(twin)] == [pd.Handle]
    assert len(pd.handles(m)) == 2  # the original keeps its own


class TestPatchUp(CoordinatedConformance):
    setting = "p"
    value = 0.3

    def make(self, value):
        return pd.PatchUp(value, block_size=2)


class TestPatchUpSoft(TestPatchUp):
    def make(self, value):
        return pd.PatchUp(value, block_size=2, mode="soft", alpha=1.0)


def test_patchup_hard_swaps_blocks_shared_by_channels_at_rate_p():
    torch.manual_seed(0)
    b, c, s, p = 512, 3, 8, 0.3
    x = torch.randn(b, c, s, s)
    index = torch.randperm(b)
    out, lam = pd.functional.patchup(x, p, index, 3)
    from_other = (out == x[index]) & (out != x)
    patched = from_other.all(dim=1)  # a patched position takes the other sample in all channels
    assert torch.equal(from_other.any(dim=1), patched)
    assert torch.equal(torch.where(patched[:, None], x[index], x), out)
    moved = index != torch.arange(b)  # a sample paired with itself shows no change
    fraction = patched.float().flatten(1).mean(1)[moved]
    assert abs(fraction.mean().item() - p) < sigma_tol(fraction)  # DropBlock's exact rate
    assert lam.dim() == 0 and 0.0 < lam.item() < 1.0


def test_patchup_soft_mixes_inside_the_blocks():
    torch.manual_seed(2)
    x = torch.randn(64, 3, 8, 8)
    index = torch.randperm(64)
    out, lam = pd.functional.patchup(x, 0.3, index, 3, lam=0.25)
    changed = (out != x).any(dim=1, keepdim=True).expand_as(x)
    assert changed.any()
    assert torch.allclose(out[changed], (0.25 * x + 0.75 * x[index])[changed], atol=1e-6)
    fraction = (out != x).any(dim=1).float().mean()
    assert lam.item() == pytest.approx(1 - 0.75 * fraction.item(), abs=0.02)


def test_patchup_handle_mixes_targets():
    torch.manual_seed(1)
    m = nn.Sequential(nn.Conv2d(3, 4, 1), nn.Identity(), nn.Flatten(), nn.Linear(4 * 36, 3))
    h = pd.attach(m, "1", pd.PatchUp(0.4, block_size=2, mode="soft", alpha=1.0))
    x = torch.randn(16, 3, 6, 6)
    logits = m.train()(x)
    assert h.layer == "1" and 0.0 < float(h.lam) < 1.0
    y = torch.randint(0, 3, (16,))
    ce = F.cross_entropy
    want = h.lam * ce(logits, y) + (1 - h.lam) * ce(logits, y[h.index])
    assert torch.allclose(h.loss(ce, logits, y), want)


@pytest.mark.parametrize("mixup_first", [True, False])
def test_two_coordinated_transforms_compose_in_the_order_they_mixed(mixup_first):
    """ManifoldMixup and PatchUp in one forward: the targets are mixed as the features were,
    the first mix nested inside the second, whatever the order of the handles given."""
    m = _model().train()
    early, late = ("0", "2") if mixup_first else ("2", "0")
    mix = pd.attach(m, early, pd.ManifoldMixup(1.0))
    patch = pd.attach(m, late, pd.PatchUp(0.5, 1, mode="soft"))
    x, y = torch.randn(8, 4), torch.arange(8) % 3
    for seed in range(5):
        torch.manual_seed(seed)
        logits = m(x)
        assert mix.layer == early and patch.layer == late  # both mixed
        first, second = (mix, patch) if mixup_first else (patch, mix)
        target = F.one_hot(y, 3).double()
        for h in (first, second):  # the soft targets the nested mixes imply
            target = float(h.lam) * target + (1 - float(h.lam)) * target[h.index]
        want = -(target * F.log_softmax(logits.double(), 1)).sum(1).mean()
        for order in ([mix, patch], [patch, mix]):
            got = pd.mixed_loss(order, F.cross_entropy, logits, y)
            assert torch.allclose(got.double(), want, atol=1e-5)


def test_mixed_loss_of_one_mix_is_the_handle_loss_and_of_none_the_criterion():
    m = _model().train()
    h = pd.attach(m, ["0", "2"], pd.ManifoldMixup(1.0))
    other = pd.attach(m, "1", pd.Dropout(0.1))  # not mixing: ignored
    x, y = torch.randn(8, 4), torch.arange(8) % 3
    torch.manual_seed(1)
    logits = m(x)
    assert torch.equal(pd.mixed_loss([other, h], F.cross_entropy, logits, y),
                       h.loss(F.cross_entropy, logits, y))
    m.eval()
    logits = m(x)
    assert torch.equal(pd.mixed_loss([h, other], F.cross_entropy, logits, y),
                       F.cross_entropy(logits, y))

"""DropBlock, Dropout2d, Dropout, DropPath, DropToken: the conformance suite, then their
statistics (DropBlock's own are in test_dropblock.py)."""

import pytest
import torch

import plugdrop as pd
from conformance import ForwardConformance
from conftest import sigma_tol


class TestDropBlock(ForwardConformance):
    def make(self, value):
        return pd.DropBlock(value, block_size=3)


class TestDropBlockShared(ForwardConformance):
    def make(self, value):
        return pd.DropBlock(value, block_size=3, shared_channels=True)


class TestDropout2d(ForwardConformance):
    def make(self, value):
        return pd.Dropout2d(value)


class TestDropout(ForwardConformance):
    def make(self, value):
        return pd.Dropout(value)


class TestDropPath(ForwardConformance):
    def make(self, value):
        return pd.DropPath(value)


class TestDropTokenOnMaps(ForwardConformance):
    """The conformance suite's maps: a token is the channel vector at a position."""

    def make(self, value):
        return pd.DropToken(value, layout="channels_first")


def test_probability_one_is_refused_with_the_reason():
    with pytest.raises(pd.SettingError, match="drop everything"):
        pd.Dropout(1.0)


@pytest.mark.parametrize("batch,fmt", [(150, None), (400, None),
                                       (400, torch.channels_last)])
def test_dropout2d_drops_whole_channels(batch, fmt):
    # 150 x 16 x 5 x 5 draws a (B, C, 1, 1) multiplier; from 65536 elements the fused kernel
    # draws one seed per map (both contiguous and channels-last).
    x = torch.rand(batch, 16, 5, 5) + 0.5
    if fmt is not None:
        x = x.to(memory_format=fmt)
    x.requires_grad_()
    y = pd.functional.dropout2d(x, 0.25)
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert torch.allclose(g, y.detach() / x.detach()) and set(g.unique().tolist()) <= {0.0, torch.tensor(1 / 0.75).item()}
    x = x.detach()
    y = y.detach()
    dropped = (y == 0).flatten(2)
    assert torch.equal(dropped.all(-1), dropped.any(-1))  # all or nothing per channel
    frac = dropped.all(-1).float().mean(1)
    assert abs(frac.mean().item() - 0.25) < sigma_tol(frac)
    kept = ~dropped.any(-1)
    assert torch.allclose(y[kept], x[kept] / 0.75)


def test_dropout2d_channels_last_and_tokens():
    x = torch.rand(300, 4, 4, 8) + 0.5
    y = pd.functional.dropout2d(x, 0.5, layout="channels_last")
    d = (y == 0)
    assert torch.equal(d.all(1).all(1), d.any(1).any(1))
    t = torch.rand(300, 1 + 16, 8) + 0.5
    y = pd.functional.dropout2d(t, 0.5, layout="tokens")
    assert torch.equal(y[:, 0], t[:, 0])
    d = y[:, 1:] == 0
    assert torch.equal(d.all(1), d.any(1))


def test_drop_path_drops_whole_samples():
    x = torch.rand(4000, 3, 4) + 0.5
    y = pd.functional.drop_path(x, 0.2)
    dropped = (y == 0).flatten(1)
    assert torch.equal(dropped.all(1), dropped.any(1))
    frac = dropped.all(1).float()
    assert abs(frac.mean().item() - 0.2) < sigma_tol(frac)
    kept = ~dropped.any(1)
    assert torch.allclose(y[kept], x[kept] / 0.8)
    y = pd.functional.drop_path(x, 0.2, scale_by_keep=False)
    assert torch.equal(y[y != 0], x[y != 0])


def test_dropout_elementwise():
    x = torch.rand(200, 500) + 0.5
    y = pd.functional.dropout(x, 0.3)
    frac = (y == 0).float().mean(1)
    assert abs(frac.mean().item() - 0.3) < sigma_tol(frac)
    assert torch.allclose(y[y != 0], x[y != 0] / 0.7)
    assert abs(y.mean().item() - x.mean().item()) < 0.01


class TestDropHead(ForwardConformance):
    def make(self, value):
        return pd.DropHead(value, num_heads=2)

    @pytest.mark.parametrize("fmt,shape", [(torch.channels_last, (4, 6, 10, 10)),
                                           (torch.channels_last_3d, (2, 6, 5, 6, 8))])
    def test_memory_format_kept_forward_and_backward(self, fmt, shape):
        super().test_memory_format_kept_forward_and_backward(fmt, shape)


def test_drop_head_drops_whole_heads_at_rate_p():
    b, n, heads, d, p = 4000, 3, 3, 4, 0.25
    y = pd.functional.drop_head(torch.ones(b, n, heads * d), p, heads)
    per_head = y.view(b, n, heads, d)
    first = per_head[:, :1, :, :1]
    assert torch.equal(per_head, first.expand_as(per_head))  # a head is all kept or all dropped
    dropped = (first == 0).float().flatten()
    assert abs(dropped.mean().item() - p) < sigma_tol(dropped)
    assert torch.allclose(first[first != 0], torch.tensor(1 / (1 - p)))


def test_drop_head_on_timm_attention_projection_input():
    timm = pytest.importorskip("timm")
    vit = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2, num_classes=3)
    x = torch.randn(2, 3, 32, 32)
    ref = vit.eval()(x)
    heads = vit.blocks[0].attn.num_heads
    h = pd.attach(vit, "blocks.*.attn.proj", pd.DropHead(0.5, num_heads=heads), where="input")
    assert torch.equal(vit(x), ref)
    assert not torch.allclose(vit.train()(x), ref)
    assert h.calls == {"blocks.0.attn.proj": 1, "blocks.1.attn.proj": 1}
    with pytest.raises(pd.ShapeError, match="num_heads=5"):
        pd.functional.drop_head(torch.randn(2, 3, 12), 0.1, 5)


@pytest.mark.parametrize("prefix", [0, 2])
def test_drop_token_drops_whole_tokens_at_rate_p_and_keeps_the_prefix(prefix):
    x = torch.rand(64, 50, 8) + 0.5
    torch.manual_seed(0)
    y = pd.functional.drop_token(x, 0.3, prefix_tokens=prefix)
    dropped = y == 0
    assert torch.equal(dropped.all(-1), dropped.any(-1))  # all channels of a token or none
    assert not dropped[:, :prefix].any()
    frac = dropped[:, prefix:].all(-1).float().mean(1)  # per sample
    assert abs(frac.mean().item() - 0.3) < sigma_tol(frac)
    kept = ~dropped.any(-1, keepdim=True).expand_as(x)
    kept[:, :prefix] = False
    assert torch.allclose(y[kept], x[kept] / 0.7)
    assert torch.equal(y[:, :prefix], x[:, :prefix])


@pytest.mark.parametrize("layout,shape,channel", [("channels_first", (32, 4, 6, 6), 1),
                                                  ("channels_last", (32, 6, 6, 4), -1)])
def test_drop_token_on_maps_drops_every_channel_of_a_position(layout, shape, channel):
    x = torch.rand(shape) + 0.5
    y = pd.functional.drop_token(x, 0.25, layout=layout)
    dropped = y == 0
    assert torch.equal(dropped.all(channel), dropped.any(channel))
    frac = dropped.all(channel).float().flatten(1).mean(1)
    assert abs(frac.mean().item() - 0.25) < sigma_tol(frac)


def test_drop_token_reads_the_prefix_tokens_of_a_timm_model():
    timm = pytest.importorskip("timm")
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=1,
                            reg_tokens=3).train()
    h = pd.attach(vit, "blocks.0", pd.DropToken(0.9))
    assert h.transform.prefix_tokens == vit.num_prefix_tokens == 4
    with pd.capture(vit, "blocks.0") as out:  # what the next module receives
        vit(torch.randn(4, 3, 32, 32))
    tokens = out["blocks.0"]
    assert not (tokens[:, :4] == 0).all(-1).any() and (tokens[:, 4:] == 0).all(-1).any()


def test_drop_token_errors_name_the_fix():
    with pytest.raises(pd.ShapeError, match="layout='channels_first'"):
        pd.functional.drop_token(torch.ones(2, 3, 4, 4), 0.1)
    with pytest.raises(pd.ShapeError, match="prefix_tokens=5 leaves no token"):
        pd.functional.drop_token(torch.ones(2, 5, 4), 0.1, prefix_tokens=5)
    with pytest.raises(pd.SettingError, match="layout"):
        pd.DropToken(0.1, layout="sequence")
    with pytest.raises(pd.SettingError, match="layout='tokens'"):
        pd.DropToken(0.1, layout="channels_first", prefix_tokens=1)
    m = torch.nn.Sequential(torch.nn.Identity()).train()
    pd.attach(m, "0", pd.DropToken(0.1))
    with pytest.raises(pd.ShapeError, match="DropToken on layer '0'.*layout='channels_first'"):
        m(torch.ones(2, 3, 4, 4))

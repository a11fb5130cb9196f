"""DropPath(skip_compute=True): each residual branch runs on its kept samples only (issue 36).

Exactness against plain DropPath for one forced mask (outputs and gradients), eval mode and
p = 0 as the bare model, a draw that keeps no sample, the refusals (one line naming the module
and its class), copies, detach, checkpointing, the spec; torch.compile and DDP are in
test_skip_compute_setups.py."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import plugdrop as pd

timm = pytest.importorskip("timm")


class Forced:
    """``torch.bernoulli`` replaced: each call returns the next of the given keep masks
    (1 keeps a sample), whatever its probability. Plain DropPath and skip_compute both draw
    their per-sample mask with one ``torch.bernoulli`` call per layer, in the layers' order."""

    def __init__(self, masks: list[list[int]]) -> None:
        self.masks, self.calls = masks, 0

    def __call__(self, ones: torch.Tensor, p: float | None = None, **kw: object) -> torch.Tensor:
        mask = self.masks[self.calls % len(self.masks)]
        self.calls += 1
        return torch.tensor(mask, dtype=ones.dtype).view(ones.shape)


def forced_step(model: nn.Module, x: torch.Tensor, masks: list[list[int]], monkeypatch
                ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Output, input gradient and parameter gradients of one training step under ``masks``."""
    model.train().zero_grad()
    x = x.detach().requires_grad_()
    with monkeypatch.context() as mp:
        mp.setattr(torch, "bernoulli", Forced(masks))
        y = model(x)
    y.square().sum().backward()
    return y.detach(), x.grad, [p.grad for p in model.parameters()]


def pair(model: nn.Module, x: torch.Tensor, p: object = 0.3, analyse: bool = True
         ) -> tuple[nn.Module, nn.Module]:
    """Plain DropPath and skip_compute on copies of ``model``, on every residual branch."""
    plain, skip = copy.deepcopy(model), copy.deepcopy(model)
    for m, flag in ((plain, False), (skip, True)):
        if analyse:
            pd.residual_branches(m, x[:2])
        pd.attach(m, "residual:", pd.DropPath(p, skip_compute=flag))
    return plain, skip


def rows_seen(model: nn.Module, name: str) -> list[int]:
    """The batch sizes module ``name`` receives, forward after forward."""
    seen: list[int] = []
    model.get_submodule(name).register_forward_pre_hook(lambda m, a: seen.append(a[0].shape[0]))
    return seen


# Four branches (two timm ViT blocks), masks over a batch of 6: some kept, all kept, none
# kept, and one kept.
MASKS = [[1, 0, 1, 1, 0, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 0, 0]]


def vit(depth: int = 2) -> nn.Module:
    """timm's ViT, small: 17 tokens of width 48."""
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=48,
                             num_heads=3, depth=depth, num_classes=3)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_one_forced_mask_gives_plain_drop_paths_outputs_and_gradients(dtype, tol,
                                                                        monkeypatch):
    # The kept rows go through the same ops as in plain DropPath, on a smaller batch: only
    # matrix products (whose BLAS blocking depends on the number of rows) and the sums over
    # the batch of the weight gradients may round differently, so they agree to a few units
    # of the dtype's last place (float64 ~1e-16, float32 ~1e-7, relative), well inside tol.
    model = vit().to(dtype)
    x = torch.randn(6, 3, 32, 32, dtype=dtype)
    plain, skip = pair(model, x)
    y0, gx0, gp0 = forced_step(plain, x, MASKS, monkeypatch)
    y1, gx1, gp1 = forced_step(skip, x, MASKS, monkeypatch)
    torch.testing.assert_close(y1, y0, rtol=tol, atol=tol)
    torch.testing.assert_close(gx1, gx0, rtol=tol, atol=tol)
    for a, b in zip(gp1, gp0):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    seen = rows_seen(skip, "blocks.0.attn")  # the first branch ran on its 4 kept samples
    forced_step(skip, x, MASKS, monkeypatch)
    assert seen == [4]


class Scale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class NormBlock(nn.Module):
    """A branch of per-sample ops whose arithmetic does not depend on the batch size."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm, self.act, self.scale = nn.LayerNorm(dim), nn.GELU(), Scale(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.scale(self.act(self.norm(x)))


class Whole(nn.Module):
    """``x + f(x)``: the branch is one module, entry and exit."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.f = nn.Sequential(nn.LayerNorm(dim), nn.GELU(), Scale(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.f(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_a_branch_of_per_sample_arithmetic_is_bit_identical(dtype, monkeypatch):
    model = nn.Sequential(NormBlock(16), Whole(16)).to(dtype)
    x = torch.randn(6, 5, 16, dtype=dtype)
    plain, skip = pair(model, x)
    assert pd.select(skip, "residual:") == ["0.scale", "1.f"]
    for masks in (MASKS[:2], MASKS[1:3], MASKS[2:]):
        y0, gx0, gp0 = forced_step(plain, x, masks, monkeypatch)
        y1, gx1, gp1 = forced_step(skip, x, masks, monkeypatch)
        assert torch.equal(y1, y0) and torch.equal(gx1, gx0)
        for a, b in zip(gp1, gp0):  # summed over the batch: only the grouping moves
            torch.testing.assert_close(a, b)


def test_same_seed_same_mask_as_plain_drop_path_on_the_cpu():
    model = vit()
    x = torch.randn(8, 3, 32, 32)
    plain, skip = pair(model, x, pd.by_depth(0.0, 0.5))
    outs = []
    for m in (plain, skip):
        torch.manual_seed(3)
        outs.append(m.train()(x))
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)


def test_eval_is_the_bare_model_and_p_zero_is_the_bare_model_bit_for_bit():
    model = vit()
    x = torch.randn(6, 3, 32, 32)
    bare = copy.deepcopy(model)
    _, skip = pair(model, x, p=pd.linear(0.0, 0.3, steps=10))
    seen = rows_seen(skip, "blocks.1.norm2")
    assert torch.equal(skip.eval()(x), bare.eval()(x))
    xs = [x.clone().requires_grad_() for _ in range(2)]
    ys = [m.train()(v) for m, v in ((bare, xs[0]), (skip, xs[1]))]  # step 0: p = 0
    for y in ys:
        y.square().sum().backward()
    assert torch.equal(ys[1], ys[0]) and torch.equal(xs[1].grad, xs[0].grad)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(skip.parameters(),
                                                           bare.parameters()))
    assert seen == [6, 6]  # nothing gathered: the branch saw the whole batch
    (h,) = pd.handles(skip)
    assert set(h.calls.values()) == {1} and not h.never_fired


class Reshaping(nn.Module):
    """Attention-like code that reshapes with -1: fails on an empty batch (as timm's Swin,
    EVA and BEiT do)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm, self.proj = nn.LayerNorm(dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        b, n, c = h.shape
        return x + self.proj(h.reshape(b, n, 2, -1).flip(2).reshape(b, n, c))


@pytest.mark.parametrize("block,empty", [(NormBlock, True), (Reshaping, False)])
def test_a_draw_keeping_no_sample_skips_the_branch(block, empty, monkeypatch):
    model = nn.Sequential(block(8))
    x = torch.randn(4, 6, 8)
    entry = "0.norm"
    _, skip = pair(model, x)
    seen = rows_seen(skip, entry)
    y, gx, gp = forced_step(skip, x, [[0, 0, 0, 0]], monkeypatch)
    # the branch runs on no sample where the model was seen to take an empty batch (else on
    # one stand-in sample, dropped): the output is the shortcut, exactly
    assert seen == [0 if empty else 1]
    assert torch.equal(y, x) and torch.equal(gx, 2 * x)
    assert all(g is not None and not g.any() for g in gp)  # zeros, never None (DDP)


def test_the_empty_batch_run_of_the_analysis_is_not_observed():
    model = nn.Sequential(NormBlock(8))
    with pd.capture(model, "0.norm", all_calls=True) as seen:
        pd.residual_branches(model, torch.randn(3, 8))
    assert [len(t) for t in seen["0.norm"]] == [3]  # the analysis's run, not the empty one


def test_a_draw_keeping_every_sample_gathers_nothing(monkeypatch):
    model = nn.Sequential(NormBlock(8))
    x = torch.randn(4, 8)
    plain, skip = pair(model, x)
    seen = rows_seen(skip, "0.norm")
    y0, _, _ = forced_step(plain, x, [[1, 1, 1, 1]], monkeypatch)
    y1, _, _ = forced_step(skip, x, [[1, 1, 1, 1]], monkeypatch)
    assert seen == [4] and torch.equal(y1, y0)


class ConvBlock(nn.Module):
    """ConvNeXt-like: depthwise conv, GroupNorm, pointwise convs; no BatchNorm."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.norm = nn.GroupNorm(1, c)
        self.pw = nn.Sequential(nn.Conv2d(c, 2 * c, 1), nn.GELU(), nn.Conv2d(2 * c, c, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pw(self.norm(self.dw(x)))


def test_conv_branches_keep_the_memory_format(monkeypatch):
    model = nn.Sequential(ConvBlock(4), ConvBlock(4)).double()
    x = torch.randn(6, 4, 5, 5, dtype=torch.float64).to(memory_format=torch.channels_last)
    plain, skip = pair(model, x)
    assert pd.select(skip, "residual:") == ["0.pw", "1.pw"]
    y0, gx0, _ = forced_step(plain, x, MASKS[:2], monkeypatch)
    y1, gx1, _ = forced_step(skip, x, MASKS[:2], monkeypatch)
    assert y1.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y1, y0, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gx1, gx0, rtol=1e-12, atol=1e-12)


def test_convnext_without_an_example_input(monkeypatch):
    """timm's ConvNeXt (LayerNorm, no BatchNorm), branches found by torch.fx at attach."""
    torch.manual_seed(0)
    model = timm.create_model("convnext_atto", num_classes=3, depths=(1, 1, 2, 1),
                              dims=(8, 16, 24, 32))
    x = torch.randn(4, 3, 32, 32)
    plain, skip = pair(model, x, analyse=False)
    masks = [[1, 0, 1, 1], [0, 1, 1, 0], [0, 0, 0, 0]]
    y0, gx0, gp0 = forced_step(plain, x, masks, monkeypatch)
    y1, gx1, gp1 = forced_step(skip, x, masks, monkeypatch)
    # float32 convolutions on a smaller batch: rounding only (see the ViT test)
    torch.testing.assert_close(y1, y0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gx1, gx0, rtol=1e-5, atol=1e-5)
    for a, b in zip(gp1, gp0):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


class Parallel(nn.Module):
    """``x + attn(y) + mlp(y)`` with ``y = norm(x)``: the norm feeds more than one branch."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn, self.mlp = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        return x + self.attn(y) + self.mlp(y)


def test_an_entry_used_outside_its_branch_moves_to_the_next_module(monkeypatch):
    model = nn.Sequential(Parallel(8))
    x = torch.randn(6, 8)
    plain, skip = pair(model, x)
    seen = {n: rows_seen(skip, n) for n in ("0.norm", "0.attn")}
    y0, gx0, _ = forced_step(plain, x, MASKS[:1], monkeypatch)
    y1, gx1, _ = forced_step(skip, x, MASKS[:1], monkeypatch)
    assert seen == {"0.norm": [6], "0.attn": [4]}  # gathered at attn, not at the shared norm
    torch.testing.assert_close(y1, y0)
    torch.testing.assert_close(gx1, gx0)


def test_copies_detach_and_handles():
    model = vit()
    x = torch.randn(4, 3, 32, 32)
    _, skip = pair(model, x)
    for clone in (copy.deepcopy(skip), pickle.loads(pickle.dumps(skip))):
        (h,) = pd.handles(clone)
        assert h.layers == pd.select(skip, "residual:") and len(pd.summary(clone)) == 4
        torch.manual_seed(1)
        a = clone.train()(x)
        torch.manual_seed(1)
        assert torch.equal(a, skip.train()(x))  # the same draws, the same hooks paired
    entries = rows_seen(skip, "blocks.0.norm1")
    assert pd.detach(skip, "blocks.0.drop_path1") == 2  # the exit, and its entry with it
    assert len(pd.summary(skip)) == 3 and not pd.is_attached(skip, "blocks.0.norm1")
    skip.train()(x)
    assert entries == [4]
    (h,) = pd.handles(skip)
    h.remove()
    assert not pd.summary(skip) and not pd.is_attached(skip)


def test_activation_checkpointing_replays_the_draw():
    model = vit()
    x = torch.randn(6, 3, 32, 32)
    _, skip = pair(model, x, p=0.5)
    ref = copy.deepcopy(skip)
    skip.train(), ref.train()
    torch.manual_seed(4)
    checkpoint(skip, x, use_reentrant=False).square().sum().backward()
    torch.manual_seed(4)
    ref(x).square().sum().backward()
    for a, b in zip(skip.parameters(), ref.parameters()):
        assert torch.equal(a.grad, b.grad)


def test_skip_compute_in_a_spec():
    x = torch.randn(4, 3, 32, 32)
    # block 1's rate, 0.2, drops 0.8 of a batch of 4 on average: under the default
    # min_dropped (1 on the CPU) skipping cannot pay, and the branch runs on all 4 samples
    # under the draw's mask; min_dropped 0.5 lets it skip
    for extra, rows in (("", 4), (", min_dropped: 0.5", 3)):
        model = vit()
        group = pd.attach_all(model, f"""
- {{layers: "residual:", transform: DropPath, skip_compute: true{extra},
   p: {{schedule: by_depth, start: 0.0, end: 0.2, by: parent}}}}
""", example_input=x[:2])
        assert "skip_compute=True" in repr(group.handles[0].transform)
        seen = rows_seen(model, "blocks.1.norm1")
        forced = Forced([[1, 1, 0, 1]])
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(torch, "bernoulli", forced)
            model.train()(x)
        # one draw per branch and forward, none where p = 0 (block 0, by_depth from 0)
        assert seen == [rows] and forced.calls == 2


def test_skip_compute_in_the_callbacks_and_an_ablation_config(tmp_path):
    """The callbacks (their shared core, which Lightning's and the Hugging Face Trainer's
    Regularize wrap) and a variant of a `plugdrop ablate` config read it as the spec does."""
    from plugdrop.ablate import config as C
    from plugdrop.integrations._core import Regularizer

    x = torch.randn(4, 3, 32, 32)
    spec = [{"layers": "residual:", "transform": "DropPath", "p": 0.3, "skip_compute": True}]
    model = vit()
    group = Regularizer(spec, None, None, None, True, None, example_input=x[:2]).attach(
        model, 10)
    assert "skip_compute=True" in repr(group.handles[0].transform)
    text = ("model: tinynet:make\ndata: digits\nimage_size: 8\nepochs: 1\nseeds: [0]\n"
            "variants:\n  baseline: []\n  skip:\n"
            "    - {layers: \"residual:\", transform: DropPath, p: 0.3, skip_compute: true}\n")
    (tmp_path / "cfg.yaml").write_text(text)
    (att,) = C.load(tmp_path / "cfg.yaml", C.parse_overrides([])).variant("skip").attachments
    other = vit()
    pd.residual_branches(other, x[:2])
    h = att.attach(other, steps=10)
    assert "skip_compute=True" in repr(h.transform)
    for m in (model, other):
        seen = rows_seen(m, "blocks.0.attn")
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(torch, "bernoulli", Forced([[1, 0, 0, 1]]))
            m.train()(x)
        assert seen == [2]


def test_where_skipping_cannot_pay_the_plain_mask_of_the_same_draw():
    """``p * batch`` under ``min_dropped`` (a small batch, a low rate): every branch runs on the
    whole batch and its output is multiplied by the host draw's mask, which is plain
    DropPath's own draw on the CPU: the same outputs and gradients, bit for bit."""
    model = vit()
    x = torch.randn(6, 3, 32, 32)
    plain, skip = copy.deepcopy(model), copy.deepcopy(model)
    for m, kw in ((plain, {}), (skip, {"skip_compute": True, "min_dropped": 6 * 0.3 + 0.1})):
        pd.residual_branches(m, x[:2])
        pd.attach(m, "residual:", pd.DropPath(0.3, **kw))
    seen = rows_seen(skip, "blocks.0.attn")
    for seed in (0, 1, 2):
        grads = []
        for m in (plain, skip):
            m.train().zero_grad()
            torch.manual_seed(seed)
            xg = x.clone().requires_grad_()
            y = m(xg)
            y.square().sum().backward()
            grads.append((y, xg.grad, [p.grad for p in m.parameters()]))
        (y0, gx0, gp0), (y1, gx1, gp1) = grads
        assert torch.equal(y1, y0) and torch.equal(gx1, gx0)
        assert all(torch.equal(a, b) for a, b in zip(gp1, gp0))
    assert seen == [6, 6, 6]
    assert not pd.DropPath(0.3, skip_compute=True).min_dropped  # default: the padding

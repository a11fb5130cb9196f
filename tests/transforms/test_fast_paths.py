"""The per-call fast paths (the hook's direct path, DropPath's and Dropout2d's eager ``_at``,
DropBlock's cached fused plan, the cached masks of ``draws.keep_mult``) give what the general
paths give for the same seed, keep eval mode the identity, count calls, and raise as before."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from plugdrop import functional as F
from plugdrop._kernels import blockdrop, cext, draws

CPU = torch.device("cpu")


def _attached(transform: pd.Transform) -> tuple[nn.Module, pd.Handle]:
    m = nn.Sequential(nn.Identity()).train()
    return m, pd.attach(m, "0", transform)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scale", [True, False])
def test_keep_mult_draws_what_bernoulli_draws(dtype, scale):
    for shape in [(2, 1, 1, 1), (3, 5, 1), (64,)]:
        torch.manual_seed(3)
        ref = torch.empty(shape, dtype=dtype).bernoulli_(0.7)
        if scale:
            ref.mul_(1 / 0.7)
        for _ in range(2):  # the cached ones and scale are never modified
            torch.manual_seed(3)
            assert torch.equal(draws.keep_mult(shape, 0.3, scale, dtype, CPU), ref)


def _general(transform: pd.ForwardTransform, x: torch.Tensor) -> torch.Tensor:
    """The transform through its general path (apply with its current values)."""
    return transform.apply(x, **transform.values())


@pytest.mark.parametrize("make,shape", [
    (lambda: pd.DropPath(0.3), (4, 6, 5, 5)),
    (lambda: pd.DropPath(0.3, scale_by_keep=False), (4, 7)),
    (lambda: pd.Dropout2d(0.3), (4, 6, 5, 5)),
    (lambda: pd.Dropout2d(0.3), (4, 6, 9)),
    (lambda: pd.Dropout2d(0.3), (4, 2048, 3, 3)),  # the fused kernel's sizes: its cached plan
    (lambda: pd.Dropout2d(0.3, layout="channels_first"), (4, 2048, 3, 3)),
    (lambda: pd.Dropout(0.3), (4, 6, 5, 5)),
    (lambda: pd.GaussianNoise(0.3), (4, 6, 5, 5)),
    (lambda: pd.GaussianNoise(0.3, multiplicative=True), (4, 6, 5, 5)),
    (lambda: pd.DropBlock(0.3, 3), (4, 6, 9, 9)),
    (lambda: pd.DropBlock(0.3, 3, shared_channels=True), (4, 6, 9, 9)),
])
@pytest.mark.parametrize("grad", [False, True])
def test_attached_fast_path_equals_the_general_path(make, shape, grad):
    m, h = _attached(make())
    x = torch.randn(shape, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        for seed in (0, 1, 2):  # the first call checks and caches; later ones take the fast path
            torch.manual_seed(seed)
            y = m(x)
            torch.manual_seed(seed)
            ref = _general(h.transform, x)
            assert torch.equal(y, ref)
            assert (y.grad_fn is not None) == grad
    assert h.calls == {"0": 3}


def test_drop_path_and_dropout2d_masks_are_the_documented_draws():
    x = torch.randn(4, 6, 5, 5)
    for transform, shape in ((pd.DropPath(0.25), (4, 1, 1, 1)), (pd.Dropout2d(0.25), (4, 6, 1, 1))):
        m, _ = _attached(transform)
        m(x)
        torch.manual_seed(7)
        y = m(x)
        torch.manual_seed(7)
        mult = torch.empty(shape).bernoulli_(0.75).mul_(1 / 0.75)
        assert torch.equal(y, x * mult)


def test_fast_paths_keep_eval_identity_and_count_training_calls_only():
    for make in (lambda: pd.DropPath(0.3), lambda: pd.Dropout2d(0.3),
                 lambda: pd.DropBlock(0.3, 3)):
        m, h = _attached(make())
        x = torch.randn(2, 4, 6, 6)
        m(x), m(x)
        assert m.eval()(x) is x
        with torch.no_grad():
            assert m(x) is x
        assert h.calls == {"0": 2}
        m.train()
        with torch.no_grad():
            assert m(x) is not x
        assert h.calls == {"0": 3}


def test_zero_p_is_the_identity_on_the_fast_path():
    for transform in (pd.DropPath(0.0), pd.Dropout2d(0.0)):
        m, _ = _attached(transform)
        x = torch.randn(2, 4, 6, 6)
        m(x)
        assert m(x) is x


def test_dropout2d_checks_every_new_shape_and_names_the_layer():
    m, _ = _attached(pd.Dropout2d(0.3))
    m(torch.randn(2, 4, 6, 6))  # a checked shape
    for bad in (torch.randn(2, 56, 56, 32), torch.randn(2, 3, 4, 5, 6, 7)):  # looks NHWC; rank 6
        for _ in range(2):
            with pytest.raises(ValueError, match="layer '0'"):
                m(bad)
    with pytest.raises(TypeError, match="layer '0'"):
        m(torch.ones(2, 4, 6, 6, dtype=torch.int64))


def test_drop_path_fast_path_raises_as_the_general_one():
    m, _ = _attached(pd.DropPath(0.3))
    with pytest.raises(ValueError, match="layer '0'.*batch dimension"):
        m(torch.tensor(1.0))
    with pytest.raises(TypeError, match="layer '0'"):
        m(torch.ones(2, 3, dtype=torch.int64))


def test_the_hook_takes_the_general_path_for_structures_and_elements():
    class Pair(nn.Module):
        def forward(self, x):
            return x, x + 1

    m = nn.Sequential(Pair()).train()
    h = pd.attach(m, "0", pd.DropPath(0.5))
    x = torch.randn(8, 3)
    a, b = m(x)
    assert torch.equal(b, x + 1) and h.calls == {"0": 1}
    m2 = nn.Sequential(nn.Identity()).train()
    pd.attach(m2, "0", pd.DropPath(0.5), element=0)
    with pytest.raises(ValueError, match="layer '0'.*single tensor"):
        m2(x)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("fmt", [None, torch.channels_last])
def test_dropblock_fused_plan_equals_the_general_path(shared, fmt):
    if cext.library() is None:
        pytest.skip("no C compiler here")
    x = torch.randn(2, 8, 9, 9)
    if fmt is not None:
        x = x.to(memory_format=fmt)
    x.requires_grad_()
    outs = []
    for cached in (False, True, True):
        if not cached:
            blockdrop._FUSED_PLANS.clear()
        torch.manual_seed(5)
        y = F.drop_block(x, 0.2, 3, shared_channels=shared)
        (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
        torch.manual_seed(5)
        with torch.no_grad():
            y_nograd = F.drop_block(x, 0.2, 3, shared_channels=shared)
        outs.append((y.detach(), g, y_nograd))
    assert blockdrop._FUSED_PLANS  # the fused route was cached
    for y, g, y_nograd in outs:
        assert torch.equal(y, outs[0][0]) and torch.equal(g, outs[0][1])
        assert torch.equal(y_nograd, y) and y.stride() == y_nograd.stride() == x.stride()
    assert (outs[0][0] == 0).any()


def test_dropout2d_fused_plan_equals_the_general_path():
    # Dropout2d on the kernel (small maps, from 64K elements) caches its plan like DropBlock:
    # the cached call draws the same maps, with and without autograd, and a channels-last
    # input (not cached: another layout) still gives each map dropped whole or scaled.
    if cext.library() is None:
        pytest.skip("no C compiler here")
    x = torch.randn(4, 2048, 3, 3, requires_grad=True)
    outs = []
    for cached in (False, True, True):
        if not cached:
            blockdrop._FUSED_PLANS.clear()
        torch.manual_seed(9)
        y = F.dropout2d(x, 0.3)
        (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
        torch.manual_seed(9)
        with torch.no_grad():
            y_nograd = F.dropout2d(x, 0.3)
        outs.append((y.detach(), g, y_nograd))
    assert any(k[0] == "dropout2d" for k in blockdrop._FUSED_PLANS)
    for y, g, y_nograd in outs:
        assert torch.equal(y, outs[0][0]) and torch.equal(g, outs[0][1])
        assert torch.equal(y_nograd, y)
    y = outs[0][0]
    dropped = (y == 0).flatten(2).all(2)
    kept = torch.isclose(y, x.detach() / 0.7).flatten(2).all(2)
    assert bool((dropped | kept).all()) and 0.25 < dropped.float().mean().item() < 0.35
    cl = x.detach().to(memory_format=torch.channels_last)
    yc = F.dropout2d(cl, 0.3)
    assert bool(((yc == 0).flatten(2).all(2) | torch.isclose(yc, cl / 0.7).flatten(2).all(2)).all())


def test_dropblock_plan_keeps_forward_mode_ad_under_no_grad():
    if cext.library() is None:
        pytest.skip("no C compiler here")
    x, v = torch.randn(2, 4, 8, 8, dtype=torch.float64), torch.randn(2, 4, 8, 8,
                                                                      dtype=torch.float64)
    F.drop_block(x, 0.2, 3)  # cache the plan
    torch.manual_seed(1)
    y = F.drop_block(x, 0.2, 3)
    with torch.no_grad(), torch.autograd.forward_ad.dual_level():
        torch.manual_seed(1)
        out = F.drop_block(torch.autograd.forward_ad.make_dual(x, v), 0.2, 3)
        tangent = torch.autograd.forward_ad.unpack_dual(out).tangent
    assert tangent is not None and torch.allclose(tangent, v * (y / x))

    def f(t):
        with torch.random.fork_rng():
            torch.manual_seed(1)
            return F.drop_block(t, 0.2, 3)

    with torch.no_grad():
        out, jv = torch.func.jvp(f, (x,), (v,))
    assert torch.equal(out, y) and torch.allclose(jv, v * (y / x))


def test_dropblock_layout_errors_are_not_cached_away():
    m, _ = _attached(pd.DropBlock(0.2, 3))
    m(torch.randn(2, 4, 8, 8))
    for _ in range(2):
        with pytest.raises(ValueError, match="layer '0'"):
            m(torch.randn(2, 56, 56, 32))


@pytest.mark.parametrize("make,shape", [
    (lambda: pd.DropPath(0.3), (4, 6, 5, 5)),
    (lambda: pd.Dropout2d(0.3), (4, 6, 5, 5)),
    (lambda: pd.Dropout2d(0.3, layout="channels_last"), (4, 5, 5, 6)),
    (lambda: pd.Dropout2d(0.3, layout="tokens"), (4, 1 + 16, 6)),
    (lambda: pd.Dropout(0.3), (4, 6)),
    (lambda: pd.GaussianNoise(0.3), (4, 6)),
    (lambda: pd.DropBlock(0.3, 3), (4, 6, 9, 9)),
    (lambda: pd.DropBlock(0.3, 3, layout="channels_last"), (4, 9, 9, 6)),
    (lambda: pd.DropBlock(0.3, 3, rescale="count"), (4, 6, 9, 9)),
    (lambda: pd.DropBlock(pd.by_depth(0.1, 0.3), 3), (4, 6, 9, 9)),
    (lambda: pd.DropPath(pd.by_depth(0.1, 0.3)), (4, 6)),
])
def test_eager_at_equals_at(make, shape):
    """What the hooks call in eager mode equals the general per-layer path."""
    m = nn.Sequential(nn.Identity(), nn.Identity()).train()
    h = pd.attach(m, ["0", "1"], make())
    t = h.transform
    x = torch.randn(shape)
    for layer in ("0", "1"):
        for seed in (0, 1):
            torch.manual_seed(seed)
            a = t._eager_at(layer, x)
            torch.manual_seed(seed)
            b = t._at(layer, x)
            assert torch.equal(a, b)


def test_a_shape_checked_under_one_layout_is_checked_again_under_another():
    x = torch.randn(2, 56, 56, 32)  # looks channels-last
    explicit, _ = _attached(pd.Dropout2d(0.3, layout="channels_first"))
    explicit(x), explicit(x)  # accepted as (B, C, H, W)
    default, _ = _attached(pd.Dropout2d(0.3))
    for _ in range(2):
        with pytest.raises(ValueError, match="channels_last"):
            default(x)


def test_cached_fast_path_state_is_not_copied_with_the_model():
    import copy
    import pickle

    m, _ = _attached(pd.DropPath(0.3))
    m(torch.randn(4, 5))
    for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        (h,) = pd.handles(clone)
        assert not any(isinstance(v, torch.Tensor) for v in vars(h.transform).values())

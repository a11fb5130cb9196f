"""The host's work per hooked call: what DropBlock, Dropout2d and noise do once per plan instead
of per call, and that each shortcut computes what the longer path computes (the same masks from
the same seeds, the same gradients)."""

import threading

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from plugdrop._kernels import autograd as KA
from plugdrop._kernels import blockdrop, cbuild, cext, draws
from plugdrop._kernels import noise as noise_kernel
from plugdrop.functional import drop_block, gaussian_noise

needs_cext = pytest.mark.skipif(cext.library() is None, reason="no C compiler here")


def _seeded(fn, x, seed=3):
    torch.manual_seed(seed)
    return fn(x)


def test_the_key_drawn_into_the_thread_buffer_is_randints():
    torch.manual_seed(11)
    want = [cext.draw_key().tolist() for _ in range(3)]
    after = torch.rand(2)
    torch.manual_seed(11)
    got = [list(draws.draw_words()) for _ in range(3)]
    assert got == want and torch.equal(torch.rand(2), after)  # the generator moved alike
    # one buffer per thread (DataParallel's replicas draw in threads)
    theirs = []
    t = threading.Thread(target=lambda: theirs.append(draws.drawn_key()))
    t.start()
    t.join()
    assert theirs[0] is not draws.drawn_key()


@needs_cext
@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
def test_the_kernel_reads_the_key_where_torch_drew_it(fmt):
    x = torch.randn(3, 5, 9, 9).to(memory_format=fmt)
    call = cext.prepare(x, torch.rand(9, 9) + 1, cext.thresholds(0.2), (3, 3))
    key = torch.tensor([123456789, 987654321], dtype=torch.int64)
    assert torch.equal(call.keyed(x, key), call(x, 123456789, 987654321))
    assert call.keyed(x, key).stride() == x.stride()


@needs_cext
@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("shared", [False, True])
def test_a_small_dropblock_is_a_native_mask_multiply_with_the_same_mask(
        monkeypatch, fmt, shared):
    # Up to MASK_MUL_MAX_NUMEL elements the plan multiplies x by the mask drawn on ones: a
    # native multiply and backward (no autograd Function, no Python in the backward); the same
    # values and gradients as the redraw that larger tensors take, from the same seed.
    x = torch.randn(2, 4, 8, 8, dtype=torch.float64).to(memory_format=fmt).requires_grad_()
    g = torch.randn(2, 4, 8, 8, dtype=torch.float64)
    f = lambda t: drop_block(t, 0.3, 3, shared_channels=shared)  # noqa: E731
    outs = {}
    limits = (blockdrop.MASK_MUL_MAX_NUMEL, 0)
    for limit in limits:
        monkeypatch.setattr(blockdrop, "MASK_MUL_MAX_NUMEL", limit)
        monkeypatch.setattr(blockdrop, "_FUSED_PLANS", {})
        runs = []
        for _ in range(2):  # the plan made, then the plan remembered
            y = _seeded(f, x)
            (gx,) = torch.autograd.grad(y, x, g)
            with torch.no_grad():
                y0 = _seeded(f, x)
            runs.append((y, gx, y0))
        outs[limit] = runs
    small, large = outs[limits[0]], outs[0]
    assert type(small[0][0].grad_fn).__name__ == "MulBackward0"
    assert type(large[0][0].grad_fn).__name__ == "KeyedDropBackward"
    for (y, gx, y0), (yl, gl, yl0) in zip(small, large):
        assert torch.equal(y, yl) and torch.equal(gx, gl) and torch.equal(y0, yl0)
        assert y.stride() == yl.stride() == x.stride()
    assert (small[0][0] == 0).any() and torch.equal(small[0][0], small[1][0])

    def fixed(t):  # one mask for every call of gradgradcheck
        with torch.random.fork_rng():
            torch.manual_seed(5)
            return f(t)

    assert torch.autograd.gradgradcheck(fixed, (x.detach().requires_grad_(),), fast_mode=True)


@needs_cext
def test_a_plain_backward_redraws_without_a_second_autograd_op(monkeypatch):
    # The keyed op saves no tensor (the plan and two ints); a plain backward calls the plan's
    # kernel directly, and only a backward that builds a graph goes through the op again.
    x = torch.randn(4, 16, 12, 12, requires_grad=True)
    assert x.numel() > blockdrop.MASK_MUL_MAX_NUMEL
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = drop_block(x, 0.2, 3)
    assert saved == [] and type(y.grad_fn).__name__ == "KeyedDropBackward"
    applied = []
    real = KA.KeyedDrop.apply
    monkeypatch.setattr(KA.KeyedDrop, "apply", lambda *a: applied.append(1) or real(*a))
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y), retain_graph=True)
    assert applied == [] and torch.equal(g != 0, y != 0)
    v = torch.ones_like(y, requires_grad=True)  # a gradient that is differentiated again
    (g2,) = torch.autograd.grad(y, x, v, create_graph=True)
    assert applied == [1] and g2.grad_fn is not None and torch.equal(g2, g)


@needs_cext
def test_a_hook_finds_the_plan_of_a_shape_it_met_in_one_lookup(monkeypatch):
    m = nn.Sequential(nn.Identity()).train()
    pd.attach(m, "0", pd.DropBlock(0.2, block_size=3))
    x = torch.randn(2, 4, 10, 10)
    m(x)  # the plan made
    calls = []
    real = blockdrop.drop_block
    monkeypatch.setattr(blockdrop, "drop_block", lambda *a: calls.append(1) or real(*a))
    torch.manual_seed(2)
    y = m(x)
    assert calls == []  # the remembered plan, not the dispatch
    torch.manual_seed(2)
    assert torch.equal(y, real(x, 0.2, 3, False, None, None, "expected"))
    m(x.double())  # another dtype: another plan, through the dispatch
    assert calls == [1]


@pytest.mark.parametrize("multiplicative", [False, True])
def test_the_hooks_small_noise_is_gaussian_noises(multiplicative):
    x = torch.randn(2, 4, 8, 8)
    assert x.numel() < KA.NOISE_MIN_NUMEL
    got = _seeded(lambda t: noise_kernel.eager_noise(t, 0.3, multiplicative), x)
    want = _seeded(lambda t: gaussian_noise(t, 0.3, multiplicative=multiplicative), x)
    assert torch.equal(got, want) and not torch.equal(got, x)
    assert noise_kernel.eager_noise(x, 0.0, multiplicative) is x
    cl = x.to(memory_format=torch.channels_last)  # not contiguous: the general path
    got = _seeded(lambda t: noise_kernel.eager_noise(t, 0.3, multiplicative), cl)
    want = _seeded(lambda t: gaussian_noise(t, 0.3, multiplicative=multiplicative), cl)
    assert torch.equal(got, want) and got.stride() == cl.stride()


@needs_cext
@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("through", ["extension", "ctypes"])
def test_the_bound_kernel_call_is_the_keyed_call(monkeypatch, fmt, through):
    # The call bound once to a small tensor (the plan's ones) computes what the prepared call
    # computes from the same key, through the CPython entry point and through ctypes alike.
    if through == "ctypes":
        monkeypatch.setattr(cbuild, "_ext", None)
    elif cext.extension() is None:
        pytest.skip("the kernel was built without the Python headers")
    ones = torch.ones(2, 4, 8, 8, dtype=torch.float64).to(memory_format=fmt)
    call = cext.prepare(ones, torch.rand(8, 8) + 1, cext.thresholds(0.2), (3, 3))
    run = call.bound(ones)
    torch.manual_seed(4)
    got = run()
    k0, k1 = draws.last_key()
    torch.manual_seed(4)
    assert [k0, k1] == cext.draw_key().tolist()  # the same words as a fresh draw
    want = call(ones, k0, k1)
    assert torch.equal(got, want) and got.stride() == want.stride() == ones.stride()
    assert (got == 0).any()
    with pytest.raises(ValueError, match="prepared geometry"):
        call.bound(torch.ones(2, 4, 8, 9, dtype=torch.float64))


@needs_cext
def test_a_small_plan_whose_kernel_fails_uses_the_key_it_drew(monkeypatch):
    # The kernel returns None when it cannot allocate its scratch memory: the plan then runs
    # its general path with the key already drawn (not a second draw), the same mask.
    x = torch.randn(2, 4, 8, 8)
    f = lambda t: drop_block(t, 0.3, 3)  # noqa: E731
    want = _seeded(f, x)
    plan = blockdrop.plan_for(x, 0.3, (3, False, "expected"))
    assert plan is not None and plan.masker is not None
    real = plan.masker
    monkeypatch.setattr(plan, "masker", lambda: (real(), None)[1])  # drew, then failed
    torch.manual_seed(3)
    got = f(x)
    assert torch.equal(got, want) and torch.equal(torch.rand(3), _seeded(
        lambda t: (f(t), torch.rand(3))[1], x))


@pytest.mark.parametrize("name", ["Dropout2d", "DropPath"])
def test_a_remembered_shape_rescales_by_the_p_of_each_step(name):
    # The hooks keep, with a shape's tensor of ones, the scale of the last p: a schedule's new
    # p (and another dtype or shape) must not reuse an old scale. Each call is the functional
    # op's draw from the same seed, its kept values x / (1 - p) at the current p.
    make = {"Dropout2d": lambda p: pd.Dropout2d(p), "DropPath": lambda p: pd.DropPath(p)}[name]
    fn = {"Dropout2d": lambda t, p: pd.functional.dropout2d(t, p),
          "DropPath": lambda t, p: pd.functional.drop_path(t, p)}[name]
    m = nn.Sequential(nn.Identity()).train()
    h = pd.attach(m, "0", make(pd.linear(0.1, 0.5, steps=2)))
    dropped = set()
    for x in (torch.randn(32, 6, 3, 3), torch.randn(32, 6, 3, 3, dtype=torch.float64),
              torch.randn(33, 6, 3, 3)):
        for step, p in ((0, 0.1), (1, 0.3), (2, 0.5)):
            h.transform._set_step(step)
            for _ in range(2):  # the shape met first through the checked path, then remembered
                got = _seeded(m, x)
                want = _seeded(lambda t: fn(t, p), x)
                assert torch.equal(got, want), (x.dtype, x.shape, step)
                kept = got != 0
                dropped.add((x.dtype, x.shape[0], p)) if (~kept).any() else None
                scale = torch.tensor(1.0 / (1.0 - p), dtype=x.dtype)
                assert torch.equal(got[kept], x[kept] * scale)
    assert len(dropped) >= 6  # most steps dropped something


def test_a_remembered_shape_drawn_at_two_ps_in_turn_scales_each_by_its_own():
    # Layers of one shape at different rates (by_depth) share the shape's tensor of ones: the
    # scale kept with it must follow the p of each call.
    m = nn.Sequential(nn.Identity(), nn.Identity()).train()
    pd.attach(m, "*", pd.DropPath(pd.by_depth(0.2, 0.6)))
    x = torch.randn(64, 3)
    for _ in range(3):
        y = m(x)
        kept = y != 0
        ratio = y[kept] / x[kept]  # both layers' scales, each sample kept by both
        want = torch.tensor(1.0 / 0.8) * torch.tensor(1.0 / 0.4)
        assert torch.allclose(ratio, want.expand_as(ratio)) and kept.any()

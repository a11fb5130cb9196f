"""Kernel paths: the fused C kernel and the torch-op path agree bit for bit on the same seeds;
the sparse and dense seed draws give the same statistics; the backward saves little."""

import math
import os
import shutil
import subprocess
import sys

import pytest
from scipy import stats
import torch

import plugdrop as pd
from plugdrop._kernels import autograd as KA
from plugdrop._kernels import cbuild, cext, dense, draws
from plugdrop.functional import drop_block
from conftest import sigma_tol

needs_cext = pytest.mark.skipif(cext.library() is None, reason="no C compiler here")


@pytest.fixture(params=["sparse", "dense", "pooled"])
def path(request, monkeypatch):
    """DropBlock's mask drawn sparsely (or by the fused kernel), densely with a boolean
    sliding-window OR (the CPU's dense path), or by max pooling uniforms (accelerators' path,
    taken here on the CPU)."""
    if request.param in ("dense", "pooled"):
        monkeypatch.setattr(draws, "SPARSE_MAX_GAMMA", -1.0)
    if request.param == "pooled":
        monkeypatch.setattr(dense, "pooled", lambda device, seeds: True)
    return request.param


@pytest.fixture(params=["cext", "torch-ops"])
def fused(request, monkeypatch):
    if request.param == "cext" and cext.library() is None:
        pytest.skip("no C compiler here")
    monkeypatch.setattr(KA, "USE_CEXT", request.param == "cext")
    return request.param


def test_sparse_seeds_are_a_bernoulli_process():
    n, g = 200_000, 0.01
    counts = torch.stack([torch.bincount(draws.sparse_seeds(n, g) // 1000, minlength=200)
                          for _ in range(20)]).float().flatten()
    # Counts of successes in windows of 1000 are Binomial(1000, 0.01).
    mean, var = 1000 * g, 1000 * g * (1 - g)
    assert abs(counts.mean().item() - mean) < 5 * math.sqrt(var / counts.numel())
    assert abs(counts.var().item() / var - 1) < 0.1
    s = draws.sparse_seeds(n, g)
    assert s.dtype == torch.int64 and (s[1:] > s[:-1]).all() and s.min() >= 0 and s.max() < n


@pytest.mark.parametrize("g", [0.0, 5e-324, 1e-205, 1e-30])
def test_sparse_seeds_of_a_vanishing_rate_are_none(g):
    # A rate that underflows to zero, or whose gaps pass int64: no seed, no error, no hang
    # (hypothesis found DropBlock with p = 1.4e-205 on bfloat16 dividing by zero).
    assert draws.sparse_seeds(1_000_000, g).tolist() == []
    x = torch.rand(2, 3, 8, 9, 10).add(0.5).to(torch.bfloat16)
    assert torch.equal(pd.functional.drop_block(x, g, 1, layout="channels_first"), x)


@pytest.mark.parametrize("g", [0.002, 0.02, 0.3])
def test_kernel_generator_is_a_bernoulli_process(g):
    # The fused kernel's counter-based generator (its torch-op reference definition; the
    # kernel agrees with it bit for bit below): counts in windows of 1000 are Binomial.
    n = 200_000
    counts = torch.stack([torch.bincount(cext.hashed_seeds(tuple(cext.draw_key().tolist()),
                                                           cext.thresholds(g), n) // 1000,
                                         minlength=200) for _ in range(20)]).float().flatten()
    mean, var = 1000 * g, 1000 * g * (1 - g)
    assert abs(counts.mean().item() - mean) < 5 * math.sqrt(var / counts.numel())
    assert abs(counts.var().item() / var - 1) < 0.1
    # Neighbours are independent: P(seed at i and at i + 1) = g**2 (same block or not).
    s = cext.hashed_seeds((5, 7), cext.thresholds(g), 2_000_000)
    pairs = torch.isin(s + 1, s).sum().item()
    expect = 2_000_000 * g * g
    assert abs(pairs - expect) < 5 * math.sqrt(expect) + 1


def _pooled_chisquare(observed: torch.Tensor, expected: torch.Tensor) -> float:
    """Chi-square p-value, the cells expected below 5 pooled into one."""
    keep = expected > 5
    obs, exp = observed[keep], expected[keep]
    if not keep.all():
        obs = torch.cat([obs, observed[~keep].sum().view(1)])
        exp = torch.cat([exp, expected[~keep].sum().view(1)])
    return stats.chisquare(obs.numpy(), exp.numpy() * obs.sum().item() / exp.sum().item()).pvalue


@pytest.mark.parametrize("g", [0.01, 0.1, 0.3])
def test_kernel_generator_blocks_hold_the_bernoulli_law(g):
    # The generator draws blocks of 256 positions by geometric gaps, each gap split as 16 h + r:
    # the joint law must still be independent draws. Chi-square tests of the seeds per block
    # (Binomial(256, g)), of the gaps between consecutive seeds (Geometric(g), across blocks
    # too), of the positions within a block and modulo 16; pairs across a block's edge and
    # across a multiple of 16 are seeds together with probability g**2.
    n, block = 4_000_000, cext.BLOCK
    s = cext.hashed_seeds((11, 3), cext.thresholds(g), n)
    per_block = torch.bincount(torch.bincount(s // block, minlength=n // block),
                               minlength=block + 1).double()
    expect = torch.tensor(stats.binom.pmf(range(block + 1), block, g)) * (n // block)
    assert _pooled_chisquare(per_block, expect) > 1e-4
    gaps = (s[1:] - s[:-1] - 1).clamp(max=200)
    observed = torch.bincount(gaps, minlength=201).double()
    pmf = torch.tensor(stats.geom.pmf(range(1, 201), g))
    expect = torch.cat([pmf, (1 - pmf.sum()).view(1)]) * gaps.numel()
    assert _pooled_chisquare(observed, expect) > 1e-4
    for m in (block, 16):
        at = torch.bincount(s % m, minlength=m).double()
        assert stats.chisquare(at.numpy()).pvalue > 1e-4
    for last, m in ((block - 1, block), (15, 16)):
        edge = s[s % m == last]
        both = torch.isin(edge + 1, s).sum().item()
        expect_both = n / m * g * g
        assert abs(both - expect_both) < 5 * math.sqrt(expect_both) + 1


@needs_cext
@pytest.mark.parametrize("gamma,fraction", [(0.0, 0.0), (1.0, 1.0)])
def test_kernel_generator_extremes(gamma, fraction, clone):
    # gamma 0: no seed anywhere; gamma 1: a seed at every position (blocks of 1 on 1D maps,
    # so the output's zeros are the seeds), in the kernel and in its reference.
    thresh = cext.thresholds(gamma)
    n = 3 * 5 * 700
    assert cext.hashed_seeds((1, 2), thresh, n).numel() == round(fraction * n)
    x = torch.ones(3, 5, 700)
    y = cext.blockdrop(x, torch.ones(700), (1, 2), thresh, (1,), shared=False)
    assert (y == 0).double().mean().item() == fraction


@pytest.mark.parametrize("shape,block", [((300, 8, 14, 14), 7), ((300, 8, 7, 7), 7),
                                         ((200, 8, 30), 5), ((50, 8, 6, 7, 8), 3)])
@pytest.mark.parametrize("shared", [False, True])
def test_both_paths_hit_p(path, shape, block, shared):
    y = drop_block(torch.ones(shape), 0.2, block, shared_channels=shared)
    frac = (y == 0).flatten(2).float().mean(-1)
    frac = frac[:, 0] if shared else frac.flatten()
    assert abs(frac.mean().item() - 0.2) < sigma_tol(frac)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("fmt", [None, torch.channels_last])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_fused_and_torch_op_paths_agree_exactly(fmt, dtype, shared, monkeypatch):
    if cext.library() is None:
        pytest.skip("no C compiler here")
    # Drawn in float32: torch 2.11's bfloat16 randn gives exact zeros, read below as dropped.
    x = torch.randn(48, 16, 14, 14).to(dtype)
    if fmt is not None:
        x = x.to(memory_format=fmt)
    x.requires_grad_()
    g = torch.randn(48, 16, 14, 14).to(dtype)
    outs = []
    for use in (True, False):
        monkeypatch.setattr(KA, "USE_CEXT", use)
        # Off, the kernel's generator runs as torch ops (its reference definition): force that
        # route so both paths see the same seeds.
        monkeypatch.setattr(KA, "fused_applies", lambda x: True)
        torch.manual_seed(11)
        y = drop_block(x, 0.15, 5, shared_channels=shared)
        (gx,) = torch.autograd.grad(y, x, g)
        outs.append((y, gx))
    (y1, g1), (y2, g2) = outs
    assert torch.equal(y1, y2) and torch.equal(g1, g2)
    if shared:
        assert torch.equal(y1 == 0, (y1[:, :1] == 0).expand_as(y1))
    assert y1.stride() == y2.stride()


@pytest.mark.parametrize("layout,shape", [("channels_last", (6, 9, 9, 16)),
                                          ("tokens", (6, 1 + 49, 16)),
                                          (None, (6, 16, 40)), (None, (3, 8, 5, 9, 9))])
def test_fused_paths_agree_on_other_layouts(layout, shape, monkeypatch):
    if cext.library() is None:
        pytest.skip("no C compiler here")
    x = torch.randn(shape)
    outs = []
    monkeypatch.setattr(KA, "fused_applies", lambda x: True)
    for use in (True, False):
        monkeypatch.setattr(KA, "USE_CEXT", use)
        torch.manual_seed(3)
        outs.append(drop_block(x, 0.2, 3, layout=layout))
    assert torch.equal(*outs)


def test_gradient_equals_output_over_input(fused, path):
    x = (torch.rand(8, 16, 12, 12) + 0.5).requires_grad_()
    torch.manual_seed(4)
    y = drop_block(x, 0.25, 3)
    y.backward(torch.ones_like(y))
    assert torch.allclose(x.grad, y.detach() / x.detach())


@needs_cext
@pytest.mark.parametrize("shared", [False, True])
def test_prepared_call_serves_its_geometry_only(shared):
    # The call a plan prepares once serves tensors of its shape, strides and dtype, bit for bit
    # what the per-call route gives; a gradient in another memory layout takes that route and
    # still gets the forward's mask (the same saved key).
    x = torch.randn(4, 6, 9, 9)
    scale = torch.rand(9, 9) + 0.5
    thresh, blocks = cext.thresholds(0.05), (3, 3)
    call = cext.prepare(x, scale, thresh, blocks, shared=shared)
    assert call is not None and call.fits(x) and call.fits(torch.randn(4, 6, 9, 9))
    assert not call.fits(x.to(memory_format=torch.channels_last))
    assert not call.fits(x.double()) and not call.fits(x[:2])
    assert torch.equal(call(x, 11, 22), cext.blockdrop(x, scale, (11, 22), thresh, blocks,
                                                        shared=shared))
    xg = (torch.rand(4, 6, 9, 9) + 0.5).requires_grad_()
    torch.manual_seed(6)
    y = drop_block(xg, 0.2, 3, shared_channels=shared)
    g = torch.randn(4, 6, 9, 9)
    (plain,) = torch.autograd.grad(y, xg, g, retain_graph=True)
    (other,) = torch.autograd.grad(y, xg, g.to(memory_format=torch.channels_last))
    assert torch.equal(plain, other)
    assert torch.allclose(plain, g * y.detach() / xg.detach())


def _saved(fn):
    total = []

    def pack(t):
        total.append(t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(total)


@pytest.mark.parametrize("make", [lambda: pd.DropBlock(0.1, 7), lambda: pd.DropBlock(0.6, 3),
                                  lambda: pd.DropBlock(0.1, 7, shared_channels=True),
                                  lambda: pd.Dropout2d(0.1), lambda: pd.DropPath(0.1),
                                  lambda: pd.Dropout(0.1), lambda: pd.GaussianNoise(0.1)])
def test_backward_saves_at_most_one_byte_per_element(make, path):
    x = torch.randn(16, 64, 14, 14, requires_grad=True)
    t = make()
    assert _saved(lambda: t(x)) <= x.numel() * 1 + 4096


def test_sparse_dropblock_saves_only_its_seeds():
    x = torch.randn(16, 64, 14, 14, requires_grad=True)
    assert _saved(lambda: drop_block(x, 0.1, 7)) < x.numel() * 0.05


def _fixed_mask(fn):
    def f(x):
        with torch.random.fork_rng():
            torch.manual_seed(9)
            return fn(x)
    return f


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("fmt", [None, torch.channels_last])
def test_every_path_is_differentiable_twice_and_forward_mode(fused, path, shared, fmt):
    x = torch.randn(3, 4, 9, 9, dtype=torch.float64)
    if fmt is not None:
        x = x.to(memory_format=fmt)
    f = _fixed_mask(lambda t: drop_block(t, 0.2, 3, shared_channels=shared))
    xr = x.clone().requires_grad_()
    assert torch.autograd.gradgradcheck(f, (xr,), fast_mode=True)
    v = torch.randn_like(x)
    y, jv = torch.func.jvp(f, (x,), (v,))
    assert torch.equal(jv, f(v))  # linear in x: the tangent is masked like x
    (gx,) = torch.autograd.grad(f(xr), xr, v)
    assert torch.equal(gx, jv)  # diagonal Jacobian: backward == forward-mode


@pytest.fixture(params=["generic", "avx512"])
def clone(request):
    """Each clone of the kernel's vectorized loops (the AVX-512 one where the CPU has it)."""
    lib = cext.library()
    if lib is None:
        pytest.skip("no C compiler here")
    before = lib.plugdrop_isa(-1)
    want = int(request.param == "avx512")
    if lib.plugdrop_isa(want) != want:
        lib.plugdrop_isa(before)
        pytest.skip("no AVX-512 on this CPU")
    yield request.param
    lib.plugdrop_isa(before)


def test_noise_kernel_is_standard_normal_and_reproducible(clone):
    x = torch.zeros(1_000_003)
    torch.manual_seed(2)
    z = pd.functional.gaussian_noise(x, 1.0)
    torch.manual_seed(2)
    assert torch.equal(z, pd.functional.gaussian_noise(x, 1.0))
    n = z.numel()
    assert abs(z.mean().item()) < 5 / math.sqrt(n) and abs(z.std().item() - 1) < 5 / math.sqrt(n)
    for t in (-3.0, -2.0, -1.0, -0.5, 0.0, 0.7, 1.5, 2.5):
        phi = 0.5 * (1 + math.erf(t / math.sqrt(2)))
        assert abs((z < t).double().mean().item() - phi) < 5 * math.sqrt(phi * (1 - phi) / n)
    # neighbours, and the two halves of a pair (512 elements apart)
    for lag in (1, 256, 512):
        assert abs((z[lag:] * z[:-lag]).mean().item()) < 5 / math.sqrt(n)
    # a pair's radius is chi with 2 degrees of freedom: P(r**2 > t) = exp(-t / 2)
    pairs = z[: n // 512 * 512].view(-1, 2, 256)
    r2 = pairs.square().sum(1).flatten()
    for t in (0.1, 1.0, 4.0, 9.0):
        prob = math.exp(-t / 2)
        assert abs((r2 > t).double().mean().item() - prob) < 5 * math.sqrt(prob * (1 - prob)
                                                                          / r2.numel())


def test_noise_kernel_clones_agree_and_thread_count_does_not_matter():
    lib = cext.library()
    if lib is None:
        pytest.skip("no C compiler here")
    x = torch.randn(3, 70_001)  # several chunks per thread, a ragged tail
    key = torch.tensor([12345, 678], dtype=torch.int64)
    before = lib.plugdrop_isa(-1)
    threads = torch.get_num_threads()
    try:
        lib.plugdrop_isa(0)
        ref = cext.noise(x, key, 0.5, False, x.stride())
        torch.set_num_threads(1)
        assert torch.equal(cext.noise(x, key, 0.5, False, x.stride()), ref)
        torch.set_num_threads(max(threads, 2))
        assert torch.equal(cext.noise(x, key, 0.5, False, x.stride()), ref)
        if lib.plugdrop_isa(1) == 1:
            assert torch.allclose(cext.noise(x, key, 0.5, False, x.stride()), ref, rtol=0,
                                  atol=1e-6)
    finally:
        torch.set_num_threads(threads)
        lib.plugdrop_isa(before)


def _graph_names(fn, depth: int = 4) -> set[str]:
    """The autograd node names within ``depth`` steps of ``fn``."""
    if fn is None or depth == 0:
        return set()
    names = {type(fn).__name__}
    for nxt, _ in fn.next_functions:
        names |= _graph_names(nxt, depth - 1)
    return names


@pytest.mark.parametrize("multiplicative", [False, True])
def test_noise_kernel_gradients_and_forward_mode(multiplicative):
    if cext.library() is None:
        pytest.skip("no C compiler here")
    x = (torch.rand(4, 16, 16, 16) + 0.5).to(memory_format=torch.channels_last)
    f = _fixed_mask(lambda t: pd.functional.gaussian_noise(t, 0.3,
                                                          multiplicative=multiplicative))
    xr = x.clone().requires_grad_()
    y = f(xr)
    # channels-last: the kernel on the contiguous copy (the noise of the same values in any
    # memory order), laid out as x
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert "GaussianNoiseBackward" in _graph_names(y.grad_fn)
    v = torch.randn_like(x)
    (gx,) = torch.autograd.grad(y, xr, v)
    expect = v * (y.detach() / x) if multiplicative else v
    assert torch.allclose(gx, expect, rtol=1e-5, atol=1e-6)
    _, jv = torch.func.jvp(f, (x,), (v,))
    assert torch.allclose(jv, expect, rtol=1e-5, atol=1e-6)
    (g2,) = torch.autograd.grad(f(xr).square().sum(), xr, create_graph=True)
    (hv,) = torch.autograd.grad(g2, xr, v)  # Hessian-vector product: 2 m**2 v
    m = y.detach() / x if multiplicative else torch.ones_like(x)
    assert torch.allclose(hv, 2 * m * m * v, rtol=1e-4, atol=1e-5)


def test_tensor_p_runs_the_kernel_as_a_custom_op_differentiable_twice():
    if cext.library() is None:
        pytest.skip("no C compiler here")
    f = _fixed_mask(lambda t: drop_block(t, torch.tensor(0.2), 3))
    x = torch.randn(3, 4, 9, 9, dtype=torch.float64, requires_grad=True)
    y = f(x)
    assert "block_drop" in type(y.grad_fn).__name__
    assert torch.autograd.gradgradcheck(f, (x,), fast_mode=True)
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert torch.equal(g, y.detach() / x.detach()) or torch.allclose(g, y.detach() / x.detach())
    # The float-p route and the op draw the same mask from the same torch seed.
    torch.manual_seed(4)
    a = drop_block(x.detach(), torch.tensor(0.2), 3)
    torch.manual_seed(4)
    b = drop_block(x.detach(), 0.2, 3)
    assert torch.equal(a == 0, b == 0)


def _kernel_cases():
    """Shapes that exercise the kernel's bit-array bookkeeping: map sizes not a multiple of 8
    (or odd: groups of 64 maps), maps larger than a group, blocks as large as the map,
    non-square blocks, 1D and 3D, a single map, several groups of maps in one sample (a shared
    mask kept from one group to the next)."""
    import random
    rng = random.Random(0)
    cases = [((2, 64, 112, 113), (3, 3)), ((3, 5, 300, 7), (7, 5)), ((1, 1, 9, 9), (9, 9)),
             ((4, 130, 7, 7), (7, 7)), ((2, 70, 7, 7), (3, 3)), ((3, 11, 201), (5,)),
             ((2, 9, 5, 6, 7), (2, 3, 4)), ((5, 33, 1, 1), (1, 1)), ((2, 600, 7, 7), (3, 3))]
    for _ in range(24):
        nd = rng.choice([1, 2, 2, 3])
        sizes = tuple(rng.randint(1, {1: 90, 2: 40, 3: 9}[nd]) for _ in range(nd))
        cases.append(((rng.randint(1, 5), rng.randint(1, 40), *sizes),
                      tuple(rng.randint(1, s) for s in sizes)))
    return cases


@needs_cext
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_equals_its_reference_on_awkward_shapes(threads, clone):
    # Bit for bit: the kernel against the generator's torch-op definition (hashed_seeds on the
    # seed grid) and the torch-op block zeroing, channels-first and channels-last, shared
    # and not, float32 and float64, on one thread and two (the work split in groups of maps),
    # with each clone of the draws (generic and AVX-512).
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for i, (shape, blocks) in enumerate(_kernel_cases()):
            sizes = shape[2:]
            valid = tuple(s - b + 1 for s, b in zip(sizes, blocks))
            for shared in (False, True):
                dtype = torch.float64 if i % 3 == 0 else torch.float32
                x = torch.randn(shape, dtype=dtype)
                if len(sizes) == 2 and i % 2:
                    x = x.to(memory_format=torch.channels_last)
                scale = (torch.rand(sizes) + 0.5).to(dtype)
                if i % 4 == 1:  # the same scale everywhere: the kernel's constant multiply
                    scale = torch.full(sizes, 1.25, dtype=dtype)
                gamma = (0.02, 0.15, 0.6)[i % 3]
                thresh, key = cext.thresholds(gamma), (1000 + i, 77 * i + 5)
                channels = 1 if shared else shape[1]
                y = cext.blockdrop(x, scale, key, thresh, blocks, shared=shared)
                seeds = cext.hashed_seeds(key, thresh, shape[0] * channels * math.prod(valid))
                ref = KA.sparse_block_drop(x, scale, seeds, channels, valid, blocks)
                assert torch.equal(y, ref), (shape, blocks, shared, x.is_contiguous())
    finally:
        torch.set_num_threads(before)


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


@pytest.mark.slow
@pytest.mark.skipif(sys.platform.startswith("win") or _compiler() is None
                    or os.environ.get("PLUGDROP_NO_CEXT", "") not in ("", "0"),
                    reason="no C compiler here, or the kernel switched off")
def test_kernel_builds_where_a_compiler_is_found(tmp_path):
    # A kernel that fails to build only warns and falls back to torch ops, and every kernel
    # test above would skip: here a build failure fails. Both the build plugdrop makes and a
    # build without any -m flag (a CPU without AVX2: the generic code, no AVX-512 clone used)
    # must compile without a warning of the compiler's -Wall.
    assert cext.library() is not None
    proc = subprocess.run([_compiler(), "-O2", "-shared", "-fPIC", "-Wall", "-Wno-psabi",
                           "-Werror", str(cext._SOURCE), "-o", str(tmp_path / "k.so")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Where the Python headers are, the library holds the CPython entry point too, imported
    # as a module (the hooks' small calls go through it), warning-free as well.
    include = cbuild.python_include()
    if include is not None:
        assert cext.extension() is not None
        proc = subprocess.run([_compiler(), "-O2", "-shared", "-fPIC", "-Wall", "-Wno-psabi",
                               "-Werror", f"-I{include}", str(cext._SOURCE),
                               str(cbuild.PY_SOURCE), "-o", str(tmp_path / "kp.so")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform.startswith("win") or _compiler() is None
                    or os.environ.get("PLUGDROP_NO_CEXT", "") not in ("", "0"),
                    reason="no C compiler here, or the kernel switched off")
def test_a_library_without_its_python_entry_point_is_built_plain(tmp_path, monkeypatch):
    # Where the CPython entry point does not compile (here: a broken copy of it), the kernel
    # library is built without it, once: a marker keeps later processes from trying again.
    monkeypatch.setenv("PLUGDROP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cbuild, "python_include", lambda: tmp_path)
    broken = tmp_path / "pycall.c"
    broken.write_text("#include <Python.h>\nthis is not C;\n")
    monkeypatch.setattr(cbuild, "PY_SOURCE", broken)
    compiled = []
    real = cbuild._compile
    monkeypatch.setattr(cbuild, "_compile", lambda *a: compiled.append(a[2]) or real(*a))
    lib, ext = cbuild._build()
    assert lib is not None and ext is None and len(compiled) == 2
    assert list((tmp_path / "plugdrop").glob("*.failed"))
    lib, ext = cbuild._build()
    assert lib is not None and ext is None and len(compiled) == 2  # neither built again
    assert lib.plugdrop_isa(-1) in (0, 1)


@pytest.mark.parametrize("shape,blocks", [((3, 4, 14, 14), (7, 7)), ((3, 4, 9, 12), (4, 3)),
                                          ((3, 4, 30), (5,)), ((2, 3, 6, 7, 8), (3, 2, 3)),
                                          ((3, 4, 5, 9), (5, 2)), ((3, 4, 6, 6), (1, 1))])
def test_pooled_mask_is_the_grown_seeds_of_the_same_uniforms(shape, blocks, monkeypatch):
    """Accelerators' mask (max pooling uniforms) is exactly the boolean window OR of the seeds
    those uniforms make (``u > 1 - gamma``), a block spanning a whole axis included."""
    gamma = 0.15
    sizes = shape[2:]
    valid = tuple(s - b + 1 for s, b in zip(sizes, blocks))
    u = torch.rand(shape[0], shape[1], *valid, generator=torch.Generator().manual_seed(3))
    monkeypatch.setattr(dense.torch, "rand", lambda size, device=None: u.clone())
    kept = dense.block_kept(shape[0], shape[1], sizes, blocks, gamma, "cpu")
    want = ~dense.grow(u > 1.0 - gamma, blocks)
    assert kept.shape == want.shape and torch.equal(kept, want)
    assert (~kept).any() and kept.any()


def test_accelerators_pool_small_masks_only():
    """The CPU keeps its paths; an accelerator pools masks of few seeds (launch-bound) and ORs
    large ones (bandwidth-bound), as measured (see POOLED_MAX_SEEDS)."""
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert not dense.pooled(cpu, 10)
    assert dense.pooled(cuda, dense.POOLED_MAX_SEEDS - 1)
    assert not dense.pooled(cuda, dense.POOLED_MAX_SEEDS)


@pytest.mark.parametrize("p,dtype", [(0.1, torch.float64), (0.7, torch.float32)])
def test_tensors_kept_across_calls_are_not_torch_func_wrappers(monkeypatch, p, dtype):
    """Before: a first call inside ``torch.func.jvp`` (nothing cached yet) made DropBlock's
    scale map inside the transform and cached it: jvp's wrapper, without storage, so the fused
    kernel's plan failed on it ("Cannot access data pointer"), and later calls would have read
    a dead wrapper. The test passed in the suite only when another test had filled the caches."""
    from plugdrop._kernels import blockdrop, geometry

    geometry.scale_map.cache_clear()
    monkeypatch.setattr(blockdrop, "_FUSED_PLANS", {})
    monkeypatch.setattr(draws, "_CACHE", {})

    def f(x):
        with torch.random.fork_rng():
            torch.manual_seed(5)
            return drop_block(x, p, 3)

    x = torch.randn(4, 6, 10, 10, dtype=dtype)
    y, jv = torch.func.jvp(f, (x,), (torch.ones_like(x),))
    assert torch.equal(y, f(x)) and torch.equal(jv, f(torch.ones_like(x)))
    kept = [plan.scale for plan in blockdrop._FUSED_PLANS.values()]
    for args in [(1.0 - p, (10, 10), (3, 3), torch.device("cpu"), torch.float32)]:
        kept.append(geometry.scale_map(*args))
    for t in kept:
        assert t.data_ptr() != 0  # a wrapper has no storage: this raises


def test_the_scale_map_in_the_inputs_dtype_is_the_float32_one_cast_and_cached():
    from plugdrop._kernels import geometry

    args = (0.93, (14, 14), (7, 7), torch.device("cpu"))
    got = geometry.scale_map_as(*args, torch.bfloat16)
    assert torch.equal(got, geometry.scale_map(*args, torch.float32).to(torch.bfloat16))
    assert geometry.scale_map_as(*args, torch.bfloat16) is got

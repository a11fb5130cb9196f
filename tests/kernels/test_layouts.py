"""Masks do not depend on memory layout: for one seed, every random function draws the same
mask (or noise) for the same values whether they are contiguous, channels-last or a strided
view no kernel takes as it is, on every kernel path (the fused C kernel, the torch-op paths,
a 0-dim tensor ``p`` as ``torch.compile`` passes it), and the gradients are the same too.
The transforms are held to the same in the conformance suite."""

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from plugdrop import functional as F
from plugdrop._kernels import autograd as KA
from plugdrop._kernels import cext
from conftest import memory_layouts

DEVICES = [pytest.param("cpu"),
           pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                         reason="needs a CUDA device"))]

#: every random function, at a rate ``p`` (a float or a 0-dim tensor)
FUNCTIONS = {
    "drop_block": lambda x, p: F.drop_block(x, p, 3),
    "drop_block/shared": lambda x, p: F.drop_block(x, p, 3, shared_channels=True),
    "drop_block/dense": lambda x, p: F.drop_block(x, p * 2, 3),
    "drop_block/count": lambda x, p: F.drop_block(x, p, 3, rescale="count"),
    "drop_block/tuple": lambda x, p: F.drop_block(x, p, (2,) * (x.dim() - 2)),
    "dropout2d": lambda x, p: F.dropout2d(x, p),
    "dropout": lambda x, p: F.dropout(x, p),
    "dropout/dense": lambda x, p: F.dropout(x, p * 2),
    "drop_path": lambda x, p: F.drop_path(x, p),
    "drop_token": lambda x, p: F.drop_token(x, p, layout="channels_first"),
    "drop_head": lambda x, p: F.drop_head(x, p, 2),
    "gaussian_noise": lambda x, p: F.gaussian_noise(x, p),
    "gaussian_noise/multiplicative": lambda x, p: F.gaussian_noise(x, p, multiplicative=True),
    "grad_noise": lambda x, p: F.grad_noise(x, p),
}
#: a small map, 65,536 elements on small maps (Dropout2d's fused kernel, the noise kernel, the
#: sparse draws), a 3-D map, a 1-D map
SHAPES = [(2, 4, 12, 12), (16, 64, 8, 8), (2, 3, 5, 6, 8), (3, 4, 30)]


@pytest.fixture(params=["cext", "torch-ops"])
def kernel(request, monkeypatch):
    if request.param == "cext" and cext.library() is None:
        pytest.skip("no C compiler here")
    monkeypatch.setattr(KA, "USE_CEXT", request.param == "cext")
    return request.param


def _draws(fn, x0: torch.Tensor, w0: torch.Tensor) -> dict[str, tuple[torch.Tensor, ...]]:
    """``fn(x)`` seeded and its input gradient, for every memory order of ``x0`` (and of the
    upstream gradient ``w0``)."""
    out = {}
    for (name, x), w in zip(memory_layouts(x0).items(), memory_layouts(w0).values()):
        x = x.detach().requires_grad_()
        torch.manual_seed(11)
        y = fn(x)
        (g,) = torch.autograd.grad(y, x, w)
        out[name] = (y.detach(), g)
    return out


def _assert_same(draws: dict[str, tuple[torch.Tensor, ...]]) -> None:
    want = draws["contiguous"]
    moved = [name for name, got in draws.items()
             if not all(torch.equal(a, b) for a, b in zip(got, want))]
    assert not moved, f"another mask or gradient than for the contiguous input: {moved}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tensor_p", [False, True], ids=["float-p", "tensor-p"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_same_seed_same_mask_in_every_memory_layout(name, shape, tensor_p, device, kernel):
    if name == "drop_head" and shape[-1] % 2:
        pytest.skip("drop_head needs a channel dim divisible by its heads")
    x0 = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(device)
    w0 = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(device)
    p = torch.tensor(0.2, device=device) if tensor_p else 0.2
    _assert_same(_draws(lambda x: FUNCTIONS[name](x, p), x0, w0))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", ["drop_block", "dropout2d", "dropout", "gaussian_noise"])
def test_other_dtypes_too(name, dtype):
    shape = (16, 64, 8, 8)
    x0 = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    w0 = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    _assert_same(_draws(lambda x: FUNCTIONS[name](x, 0.2), x0, w0))


@pytest.mark.parametrize("layout", ["channels_last", "tokens"])
def test_other_logical_layouts_in_any_memory_order(layout):
    # (B, H, W, C) and (B, N, C) tensors viewed channels-first inside: their own memory
    # orders (as a permute of another tensor gives them) draw the same masks too
    shape = (16, 9, 9, 32) if layout == "channels_last" else (16, 1 + 64, 32)
    x0 = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    w0 = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    for fn in (lambda x: F.drop_block(x, 0.2, 3, layout=layout),
               lambda x: F.dropout2d(x, 0.2, layout=layout)):
        draws = {}
        for name, perm in {"contiguous": None, "transposed": (0, 2, 1) if x0.dim() == 3
                           else (0, 3, 1, 2)}.items():
            if perm is None:
                x, w = x0, w0
            else:  # the same values, stored in another order
                inv = sorted(range(len(perm)), key=perm.__getitem__)
                x = x0.permute(perm).contiguous().permute(inv)
                w = w0.permute(perm).contiguous().permute(inv)
            x = x.detach().requires_grad_()
            torch.manual_seed(11)
            y = fn(x)
            draws[name] = (y.detach(), torch.autograd.grad(y, x, w)[0])
        _assert_same(draws)


@pytest.mark.slow
def test_compiled_dropblock_draws_the_same_mask_in_every_memory_layout():
    torch._dynamo.reset()
    m = nn.Sequential(nn.Identity()).train()
    pd.attach(m, "0", pd.DropBlock(0.2, 3))
    cm = torch.compile(m, backend="aot_eager", fullgraph=True, dynamic=False)
    x0 = torch.randn(2, 4, 12, 12, generator=torch.Generator().manual_seed(0))
    w0 = torch.randn(2, 4, 12, 12, generator=torch.Generator().manual_seed(1))
    try:
        _assert_same(_draws(cm, x0, w0))
    finally:
        torch._dynamo.reset()


def test_odd_layouts_keep_their_memory_order():
    x = memory_layouts(torch.randn(2, 4, 12, 12))
    for name in ("last_dims_swapped", "batch_innermost"):  # dense: its own strides kept
        for fn in (lambda t: F.drop_block(t, 0.2, 3), lambda t: F.dropout(t, 0.4),
                   lambda t: F.gaussian_noise(t, 0.2)):
            assert fn(x[name]).stride() == x[name].stride()
    # a channels-last view with gaps: a channels-last result
    y = F.drop_block(x["channels_last_with_gaps"], 0.2, 3)
    assert y.is_contiguous(memory_format=torch.channels_last)


def test_results_are_laid_out_as_an_elementwise_op_lays_them_out():
    # what a copy computed on x.contiguous() is turned into: the strides x * 2 has, for views
    # of every rank, permutation, size-1 dims and gaps
    from plugdrop._layout import laid_out_as

    g = torch.Generator().manual_seed(0)

    def pick(n: int) -> int:
        return int(torch.randint(n, (), generator=g))

    for _ in range(500):
        nd = 1 + pick(5)
        shape = [(1, 1, 2, 3, 4)[pick(5)] for _ in range(nd)]
        perm = torch.randperm(nd, generator=g).tolist()
        x = torch.randn([shape[p] for p in perm]).permute([perm.index(i) for i in range(nd)])
        if pick(3) == 0:  # a gap along one dim
            d = pick(nd)
            wide = torch.randn([2 * s if i == d else s for i, s in enumerate(x.shape)])
            x = wide.narrow(d, 0, x.shape[d]) if pick(2) else wide.unfold(d, 1, 2).squeeze(-1)
        y = laid_out_as((x * 2).contiguous(), x)
        assert y.stride() == (x * 2).stride() and torch.equal(y, x * 2), (x.shape, x.stride())

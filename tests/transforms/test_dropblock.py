"""DropBlock statistics: exact dropped fraction, block shape, per-channel masks, expectation."""

import math

import pytest
import torch
import torch.nn.functional as F

import plugdrop as pd
from plugdrop._kernels import autograd as KA
from plugdrop._kernels import draws, geometry
from plugdrop.functional import drop_block
from conftest import sigma_tol, triton_path


@pytest.fixture(autouse=True, params=["fused", "torch-ops", "dense",
                                      pytest.param("triton", marks=pytest.mark.triton)])
def kernel_path(request, monkeypatch):
    """Every test here runs on each kernel path: the fused C kernel drawing its seeds from its
    counter-based generator, the sparse seeds with torch ops, the dense draw (torch.compile's
    path, and CUDA's without Triton), and the Triton kernel (CUDA's; on the CPU through
    Triton's interpreter, with the C kernel's generator)."""
    from plugdrop._kernels import cext

    if request.param == "triton":
        triton_path(monkeypatch)
        return request.param
    if request.param == "fused" and cext.library() is None:
        pytest.skip("no C compiler here")
    monkeypatch.setattr(KA, "USE_CEXT", request.param == "fused")
    if request.param == "dense":
        monkeypatch.setattr(draws, "SPARSE_MAX_GAMMA", -1.0)
    return request.param


def _per_map_fraction(y: torch.Tensor) -> torch.Tensor:
    """Dropped fraction of each (sample, channel) map of a channels-first output."""
    return (y == 0).flatten(2).float().mean(-1).flatten()


def _paper_fraction(p, sizes, blocks):
    """Expected dropped fraction with the paper's closed-form gamma (ignores overlaps)."""
    gamma = geometry.paper_gamma(p, sizes, blocks)
    return 1.0 - sum(w * (1.0 - gamma) ** n for n, w in geometry.coverage_histogram(sizes, blocks))


@pytest.mark.parametrize("p", [0.05, 0.1, 0.3, 0.7])
@pytest.mark.parametrize("size,block", [(7, 7), (14, 7), (8, 3), (5, 9), (13, 4), (28, 1), (9, 2)])
def test_solved_fraction_is_exactly_p(p, size, block):
    sizes, blocks = (size, size), (min(block, size),) * 2
    q = geometry.solve_keep(p, sizes, blocks)
    frac = 1.0 - sum(w * q ** n for n, w in geometry.coverage_histogram(sizes, blocks))
    assert frac == pytest.approx(p, abs=1e-12)
    # The tensor solver used under torch.compile agrees with the host solver.
    qt = geometry.solve_keep_tensor(torch.tensor(p), sizes, blocks)
    assert qt.item() == pytest.approx(q, abs=1e-6)  # p is float32 here


@pytest.mark.parametrize(
    "shape,block",
    [
        ((2000, 8, 7, 7), 7),  # block as large as the map: timm drops ~0.92 here
        ((400, 8, 14, 14), 7),
        ((400, 8, 13, 13), 4),  # even block
        ((1000, 8, 5, 5), 9),  # block larger than the map: clipped
        ((400, 16, 28), 5),  # 1D
        ((100, 8, 6, 7, 8), 3),  # 3D, non-cubic map
    ],
)
@pytest.mark.parametrize("p", [0.1, 0.4])
def test_dropped_fraction_matches_p(shape, block, p):
    y = drop_block(torch.ones(shape), p, block)
    frac = _per_map_fraction(y)
    assert abs(frac.mean().item() - p) < sigma_tol(frac)


def test_exact_where_paper_formula_is_not():
    # With overlapping blocks the paper's gamma under-drops; ours hits p within the noise.
    sizes, blocks, p = (10, 10), (5, 5), 0.4
    paper = _paper_fraction(p, sizes, blocks)
    y = drop_block(torch.ones(3000, 8, 10, 10), p, 5)
    frac = _per_map_fraction(y)
    tol = sigma_tol(frac)
    assert abs(frac.mean().item() - p) < tol
    assert abs(paper - p) > 3 * tol  # the test would catch the paper's formula


def _is_union_of_blocks(dropped: torch.Tensor, bh: int, bw: int) -> bool:
    """True if every dropped position lies in a bh x bw square fully inside the map and fully
    dropped (morphological opening leaves the set unchanged)."""
    d = dropped.float()
    eroded = -F.max_pool2d(-d, (bh, bw), stride=1)  # 1 where the whole square is dropped
    opened = F.max_pool2d(F.pad(eroded, (bw - 1, bw - 1, bh - 1, bh - 1)), (bh, bw), stride=1)
    return torch.equal(opened, d)


@pytest.mark.parametrize("size,block", [(14, 3), (12, 4), (9, 9), (10, 2)])
def test_blocks_are_whole_squares_inside_the_map(size, block):
    y = drop_block(torch.ones(64, 4, size, size), 0.2, block)
    dropped = y == 0
    assert dropped.any()
    assert _is_union_of_blocks(dropped.flatten(0, 1).unsqueeze(1), block, block)
    # A single seed drops exactly block x block positions: the smallest dropped region.
    counts = dropped.flatten(2).sum(-1)
    assert counts[counts > 0].min().item() >= block * block


def test_rectangular_block():
    y = drop_block(torch.ones(64, 4, 12, 12), 0.2, (2, 5))
    assert _is_union_of_blocks((y == 0).flatten(0, 1).unsqueeze(1), 2, 5)


def test_masks_are_independent_per_channel():
    p = 0.3
    y = drop_block(torch.ones(500, 2, 8, 8), p, 3)
    a, b = (y[:, 0] == 0).float(), (y[:, 1] == 0).float()
    both = (a * b).mean((1, 2))  # per-sample fraction dropped in both channels
    # Independent channels: position i is dropped in both with probability p_i**2, where
    # p_i = 1 - q**n_i varies over the map (edges are covered by fewer seeds).
    q = geometry.solve_keep(p, (8, 8), (3, 3))
    p_i = 1.0 - q ** geometry.coverage_map((8, 8), (3, 3), "cpu").double()
    assert abs(both.mean().item() - (p_i**2).mean().item()) < sigma_tol(both)
    assert not torch.equal(a, b)


def test_shared_channels_share_the_mask():
    y = drop_block(torch.ones(50, 6, 9, 9), 0.3, 3, shared_channels=True)
    assert torch.equal(y == 0, (y[:, :1] == 0).expand_as(y))
    frac = (y[:, 0] == 0).float().mean((1, 2))
    assert abs(frac.mean().item() - 0.3) < sigma_tol(frac)


@pytest.mark.parametrize("size,block", [(7, 3), (10, 5), (6, 4)])
def test_expectation_is_preserved_at_every_position(size, block):
    x = torch.rand(size, size) + 0.5
    y = drop_block(x.expand(4000, 2, size, size).contiguous(), 0.3, block)
    per_pos = y.flatten(0, 1)  # (N, H, W) samples
    mean = per_pos.mean(0)
    sem = per_pos.std(0) / math.sqrt(per_pos.shape[0])
    assert ((mean - x).abs() < 5 * sem).all()
    # Kept values are the input times the position's scale, never anything else.
    kept = y != 0
    ratio = torch.where(kept, y / x, torch.zeros(()))
    assert (ratio[kept] >= 1.0).all()


def test_count_rescale_follows_the_paper():
    x = torch.rand(8, 4, 10, 10) + 0.1
    y = drop_block(x, 0.2, 3, rescale="count")
    kept = y != 0
    scale = x.numel() / kept.sum().item()
    assert torch.allclose(y[kept], x[kept] * scale, rtol=1e-5)


def test_count_rescale_never_divides_by_zero():
    # A single position whose block always covers it: with p close to 1 it is always dropped.
    y = drop_block(torch.ones(1, 1, 1, 1), 0.999999, 1, rescale="count")
    assert torch.isfinite(y).all()


def test_no_rescale():
    y = drop_block(torch.ones(8, 4, 10, 10), 0.2, 3, rescale="none")
    assert set(y.unique().tolist()) <= {0.0, 1.0}


def test_fp16_scaling_does_not_overflow():
    # torchvision sums an fp16 mask, overflows to inf and returns all zeros at this size.
    x = torch.ones(8, 64, 56, 56, dtype=torch.float16)
    for rescale in ("expected", "count"):
        y = drop_block(x, 0.1, 7, rescale=rescale)
        assert y.dtype == torch.float16
        assert torch.isfinite(y).all()
        assert 0.05 < (y == 0).float().mean().item() < 0.15


@pytest.mark.parametrize("layout,shape", [("channels_last", (300, 9, 9, 4)),
                                          ("tokens", (300, 1 + 81, 4))])
def test_layouts(layout, shape):
    x = torch.rand(shape) + 0.5
    y = drop_block(x, 0.2, 3, layout=layout)
    assert y.shape == x.shape
    if layout == "tokens":
        assert torch.equal(y[:, 0], x[:, 0])  # class token untouched
        grid = y[:, 1:].reshape(300, 9, 9, 4)
    else:
        grid = y
    maps = grid.movedim(-1, 1)  # (B, C, H, W)
    frac = _per_map_fraction(maps)
    assert abs(frac.mean().item() - 0.2) < sigma_tol(frac)
    assert _is_union_of_blocks((maps == 0).flatten(0, 1).unsqueeze(1), 3, 3)


def test_tokens_with_explicit_prefix():
    x = torch.rand(20, 2 + 16, 8) + 0.5
    y = drop_block(x, 0.3, 2, layout="tokens", prefix_tokens=2)
    assert torch.equal(y[:, :2], x[:, :2])
    with pytest.raises(ValueError, match="not a square patch grid"):
        drop_block(x, 0.3, 2, layout="tokens", prefix_tokens=1)


def test_same_seed_same_mask():
    x = torch.randn(4, 8, 14, 14)
    torch.manual_seed(3)
    a = drop_block(x, 0.2, 5)
    torch.manual_seed(3)
    b = drop_block(x, 0.2, 5)
    assert torch.equal(a, b)


def test_compiled_value_path_matches_statistics():
    # The 0-dim tensor path (used under torch.compile) gives the same distribution.
    y = drop_block(torch.ones(2000, 8, 7, 7), torch.tensor(0.1), 3)
    frac = _per_map_fraction(y)
    assert abs(frac.mean().item() - 0.1) < sigma_tol(frac)


def test_wrong_rank_and_layout_errors():
    with pytest.raises(ValueError, match=r"shape \(4, 10\)"):
        drop_block(torch.randn(4, 10), 0.1, 3)
    with pytest.raises(ValueError, match="layout='tokens'"):
        drop_block(torch.randn(2, 197, 64), 0.1, 3)
    with pytest.raises(ValueError, match="layout='channels_last'"):
        drop_block(torch.randn(2, 7, 7, 96), 0.1, 3)
    # An explicit layout turns the heuristic off.
    drop_block(torch.randn(2, 7, 7, 96), 0.1, 3, layout="channels_first")
    with pytest.raises(ValueError, match="block_size"):
        drop_block(torch.randn(2, 3, 8, 8), 0.1, (3, 3, 3))


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, float("nan")])
def test_bad_probability(bad):
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        pd.DropBlock(bad)
    with pytest.raises(ValueError):
        drop_block(torch.ones(1, 1, 4, 4), bad, 2)


@pytest.mark.parametrize("bad,exc", [(0, ValueError), (-3, ValueError), (2.5, TypeError),
                                     ("7", TypeError), ((3, 0), ValueError)])
def test_bad_block_size(bad, exc):
    with pytest.raises(exc, match="block_size"):
        pd.DropBlock(0.1, block_size=bad)


def test_integer_and_boolean_inputs_raise_a_type_error():
    import torch.nn as nn
    for x in (torch.ones(2, 3, 8, 8, dtype=torch.long), torch.ones(2, 3, 8, 8, dtype=torch.bool)):
        with pytest.raises(TypeError, match="floating-point"):
            pd.DropBlock(0.1, 3)(x)
        with pytest.raises(TypeError, match="floating-point"):
            pd.functional.drop_block(x, 0.1, 3)
        with pytest.raises(TypeError, match="floating-point"):
            pd.Dropout(0.1)(x)
    m = nn.Sequential(nn.Identity())
    pd.attach(m, "0", pd.DropBlock(0.1, 3))
    with pytest.raises(TypeError, match=r"layer '0'.*floating-point"):
        m.train()(torch.ones(2, 3, 8, 8, dtype=torch.long))


def test_a_block_size_of_the_wrong_rank_raises_at_attach():
    import torch.nn as nn
    m = nn.Sequential(nn.Conv2d(3, 3, 1), nn.Conv1d(3, 3, 1), nn.Identity())
    with pytest.raises(pd.ShapeError, match=r"layer '0' \(Conv2d\) produces 2-D maps"):
        pd.attach(m, "0", pd.DropBlock(0.1, (3, 3, 3)))
    with pytest.raises(pd.ShapeError, match="1-D maps"):
        pd.attach(m, ["1"], pd.DropBlock(0.1, (3, 3)))
    assert not pd.summary(m)
    pd.attach(m, "0", pd.DropBlock(0.1, (3, 2)))
    pd.attach(m, "2", pd.DropBlock(0.1, (3, 3, 3)))  # rank unknown: checked at the forward


def test_sequence_layout_drops_blocks_along_time():
    x = torch.randn(8, 20, 6)  # (B, T, C): an LSTM's output
    torch.manual_seed(0)
    y = drop_block(x, 0.3, 4, layout="sequence")
    torch.manual_seed(0)
    ref = drop_block(x.movedim(-1, 1), 0.3, 4, layout="channels_first")
    assert torch.equal(y, ref.movedim(1, -1))
    with pytest.raises(pd.ShapeError, match="layout='sequence'"):
        drop_block(torch.randn(2, 3, 4, 5), 0.3, 2, layout="sequence")


def test_prefix_tokens_or_grid_without_the_tokens_layout_is_an_error():
    with pytest.raises(pd.SettingError, match="layout='tokens'"):
        pd.DropBlock(0.1, 3, prefix_tokens=1)
    with pytest.raises(pd.SettingError, match="layout='tokens'"):
        pd.Dropout2d(0.1, grid_size=(2, 2), layout="channels_last")
    with pytest.raises(pd.SettingError, match="grid_size"):
        pd.DropBlock(0.1, 3, layout="tokens", grid_size=(2, 0))


def test_a_non_square_grid_needs_grid_size_and_is_then_exact():
    x = torch.randn(2, 1 + 14 * 28, 8)
    with pytest.raises(pd.ShapeError, match="grid_size"):
        pd.DropBlock(0.2, 3, layout="tokens")(x)  # no fake 19x19 grid
    t = pd.DropBlock(0.2, 3, layout="tokens", grid_size=(14, 28), prefix_tokens=1)
    torch.manual_seed(0)
    y = t(x)
    torch.manual_seed(0)
    ref = drop_block(x[:, 1:].reshape(2, 14, 28, 8), 0.2, 3, layout="channels_last")
    assert torch.equal(y[:, :1], x[:, :1])
    assert torch.equal(y[:, 1:], ref.reshape(2, 14 * 28, 8))


def test_grid_and_prefix_tokens_come_from_a_timm_model():
    timm = pytest.importorskip("timm")
    vit = timm.create_model("vit_tiny_patch16_224", img_size=(32, 64), depth=1, reg_tokens=4,
                            num_classes=3)
    t = pd.DropBlock(0.2, 1, layout="tokens")
    pd.attach(vit, "blocks.0", t)
    assert t.grid_size == (2, 4) and t.prefix_tokens == 5
    vit.train()(torch.randn(2, 3, 32, 64))


@pytest.mark.parametrize("shape", [(2, 56, 56, 32), (2, 12, 12, 768)])
def test_channels_last_maps_with_few_channels_are_not_read_channels_first(shape):
    with pytest.raises(pd.ShapeError, match="layout='channels_last'"):
        drop_block(torch.randn(shape), 0.1, 3)
    drop_block(torch.randn(shape), 0.1, 3, layout="channels_last")
    drop_block(torch.randn(2, 8, 14, 14), 0.1, 3)  # square channels-first maps pass

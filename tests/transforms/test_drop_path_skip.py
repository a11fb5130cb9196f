"""DropPath(skip_compute=True) as a transform, and its kernels: the draw of the kept samples
(the very draw of plain DropPath on the CPU, kept with probability 1 - p), the gather and the
scatter (memory format, rescaling, a branch that changed its batch)."""

from __future__ import annotations

import pytest
import torch

import plugdrop as pd
from plugdrop._kernels import kept as K
from plugdrop._kernels import masks


def test_the_setting_and_the_direct_call():
    t = pd.DropPath(0.25, skip_compute=True)
    assert repr(t) == "DropPath(p=0.25, skip_compute=True)" and t.skip_compute
    with pytest.raises(TypeError, match="skip_compute must be a bool"):
        pd.DropPath(0.1, skip_compute="yes")
    x = torch.randn(16, 5)
    torch.manual_seed(0)
    a = t(x)  # called on a tensor, without hooks: plain DropPath
    torch.manual_seed(0)
    assert torch.equal(a, pd.DropPath(0.25)(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_draw_is_plain_drop_paths_on_the_cpu(dtype):
    x = torch.ones(64, 3, 4, dtype=dtype)
    torch.manual_seed(5)
    kept = K.draw(x, 0.3, True, True)
    torch.manual_seed(5)
    plain = masks.drop_path(x, 0.3, True)
    assert kept is not None and kept.rows is not None
    assert kept.rows.tolist() == plain[:, 0, 0].nonzero().view(-1).tolist()
    assert kept.kept == len(kept.rows) and kept.batch == 64
    assert kept.scale == plain.max().item()  # 1 / 0.7 rounded to the dtype, as plain's
    assert K.draw(x, 0.0, True, True) is None


def test_the_kept_fraction_is_one_minus_p():
    torch.manual_seed(0)
    x = torch.empty(1000, 1)
    kept = sum(K.draw(x, 0.3, True, True).kept for _ in range(20))
    n = 20 * 1000
    assert abs(kept / n - 0.7) < 5 * (0.7 * 0.3 / n) ** 0.5


def test_no_sample_kept_gives_no_row_or_one_stand_in():
    x = torch.randn(4, 3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "bernoulli", lambda ones, p: torch.zeros_like(ones))
        empty = K.draw(x, 0.5, True, True)
        stand_in = K.draw(x, 0.5, True, False)
    assert empty.kept == stand_in.kept == 0
    assert len(empty.rows) == 0 and stand_in.rows.tolist() == [0]
    for kept in (empty, stand_in):
        y = K.take_rows(x.requires_grad_(), kept.rows, kept.kept)
        out = K.put_rows(y * 3, kept)
        assert torch.equal(out, torch.zeros(4, 3)) and out.grad_fn is not None


@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
def test_gather_and_scatter_keep_the_memory_format_and_rescale(fmt):
    x = torch.randn(6, 3, 4, 5).to(memory_format=fmt).requires_grad_()
    rows = torch.tensor([0, 2, 5])
    y = K.take_rows(x, rows, 3)
    assert torch.equal(y, x[rows]) and y.is_contiguous(memory_format=fmt)
    kept = K.Kept(rows, 6, 3, 2.0)
    out = K.put_rows(y, kept)
    assert out.is_contiguous(memory_format=fmt)
    want = torch.zeros(6, 3, 4, 5)
    want[rows] = 2.0 * x.detach()[rows]
    assert torch.equal(out, want)
    out.backward(torch.ones_like(out))
    assert torch.equal(x.grad[rows], torch.full((3, 3, 4, 5), 2.0))
    assert not x.grad[[1, 3, 4]].any()


def test_a_branch_that_changed_its_batch_is_a_shape_error():
    kept = K.Kept(torch.tensor([0, 2]), 4, 2, None)
    with pytest.raises(pd.ShapeError, match="ran on 2 sample.*shape \\(3, 5\\)"):
        K.put_rows(torch.randn(3, 5), kept)


@pytest.mark.parametrize("count,scale", [(3, 2.0), (2, None), (0, 1.5)])
def test_gather_and_scatter_are_twice_differentiable(count, scale):
    """The gather's and the scatter's own backward (one pass each, the padding's gradient
    zero): gradcheck and gradgradcheck in float64, with padding (4 rows run, ``count`` kept)."""
    rows = torch.tensor([4, 1, 0, 3])
    kept = K.Kept(rows, 6, count, scale)
    x = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)

    def f(x: torch.Tensor) -> torch.Tensor:
        return K.put_rows(K.take_rows(x, rows, count).sin(), kept)

    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradgradcheck(f, (x,))
    out = f(x)
    want = torch.zeros(6, 3, dtype=torch.float64)
    want[rows[:count]] = x.detach()[rows[:count]].sin() * (scale or 1.0)
    assert torch.equal(out, want)

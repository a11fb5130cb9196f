"""DropPath(skip_compute=True, pad=N): the kept samples padded with dropped ones to a multiple
of N rows, so that a GPU meets a bounded number of batch sizes (issue 51, item 3). On the CPU:
the same outputs and gradients as without padding for one forced mask, the branch sees only
bucket sizes, and the ladder bounds the sizes for every count."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_skip_compute import MASKS, forced_step, rows_seen, vit

import plugdrop as pd
from plugdrop._kernels.kept import padded, pays


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(1, 512), st.integers(1, 64), st.data())
def test_the_ladder_bounds_the_batch_sizes(batch, pad, data):
    count = data.draw(st.integers(0, batch))
    rows = padded(count, batch, pad)
    assert count <= rows <= batch
    assert rows in (0, batch) or rows % pad == 0
    assert rows - count < pad  # less than one bucket of padding
    sizes = {padded(c, batch, pad) for c in range(batch + 1)}
    assert len(sizes) <= batch // pad + 2


def test_skipping_pays_from_min_dropped_expected_drops():
    assert pays(0.125, 64, 8) and not pays(0.1, 64, 8)  # 8 and 6.4 expected drops
    assert pays(0.25, 4, 1) and not pays(0.2, 4, 1)
    assert pays(0.5, 1, 0)  # min_dropped 0: always skips


@pytest.mark.parametrize("pad", [2, 4, 8])
def test_padding_changes_no_output_and_no_gradient(pad, monkeypatch):
    torch.manual_seed(0)
    model = vit()
    x = torch.randn(6, 3, 32, 32, dtype=torch.float64)
    model = model.double()
    plain, padded_model = copy.deepcopy(model), copy.deepcopy(model)
    for m, how in ((plain, {}), (padded_model, {"pad": pad})):
        pd.residual_branches(m, x[:2])  # min_dropped 0: skipping even where it cannot pay
        pd.attach(m, "residual:", pd.DropPath(0.3, skip_compute=True, min_dropped=0, **how))
    seen = rows_seen(padded_model, "blocks.0.norm1")
    y0, gx0, gp0 = forced_step(plain, x, MASKS, monkeypatch)
    y1, gx1, gp1 = forced_step(padded_model, x, MASKS, monkeypatch)
    torch.testing.assert_close(y1, y0, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gx1, gx0, rtol=1e-12, atol=1e-12)
    for a, b in zip(gp1, gp0):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # the first branch kept 4 of 6: it ran on 4 rows rounded up to the bucket
    assert seen[0] == padded(4, 6, pad)


def test_pad_needs_skip_compute_and_a_whole_number():
    with pytest.raises(pd.SettingError, match="pads the kept samples of skip_compute"):
        pd.DropPath(0.1, pad=8)
    with pytest.raises(pd.SettingError, match="pad must be >= 1"):
        pd.DropPath(0.1, skip_compute=True, pad=0)
    with pytest.raises(pd.SettingError, match="min_dropped=4.*add skip_compute=True"):
        pd.DropPath(0.1, min_dropped=4)
    with pytest.raises(pd.SettingError, match="min_dropped"):
        pd.DropPath(0.1, skip_compute=True, min_dropped=-1)
    spec = pd.parse_spec('[{layers: "residual:", transform: DropPath, p: 0.1, '
                         'skip_compute: true, pad: 8}]')
    assert spec[0].describe()["pad"] == 8

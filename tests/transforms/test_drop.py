"""DropBlock, Dropout2d, Dropout, DropPath: the conformance suite, then their statistics
(DropBlock's own are in test_dropblock.py)."""

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


def test_probability_one_is_refused_with_the_reason():
    with pytest.raises(pd.SettingError, match="drop everything"):
        pd.Dropout(1.0)


def test_dropout2d_drops_whole_channels():
    x = torch.rand(400, 16, 5, 5) + 0.5
    y = pd.functional.dropout2d(x, 0.25)
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

"""The conformance suite every forward transform runs, then per-transform statistics."""

import copy
import pickle

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from conftest import sigma_tol

FORWARD = {
    "DropBlock": lambda p: pd.DropBlock(p, block_size=3),
    "DropBlockShared": lambda p: pd.DropBlock(p, block_size=3, shared_channels=True),
    "Dropout2d": lambda p: pd.Dropout2d(p),
    "Dropout": lambda p: pd.Dropout(p),
    "DropPath": lambda p: pd.DropPath(p),
    "GaussianNoise": lambda p: pd.GaussianNoise(p),
}


def _model():
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 6, 3, padding=1))


@pytest.fixture(params=sorted(FORWARD))
def make(request):
    return FORWARD[request.param]


def test_zero_is_identity(make):
    m = _model().train()
    x = torch.randn(4, 3, 10, 10)
    ref = m(x)
    with pd.attach(m, "0", make(0.0)):
        assert torch.equal(m(x), ref)


def test_eval_returns_the_same_tensor(make):
    m = nn.Sequential(nn.Identity())
    x = torch.randn(4, 3, 10, 10)
    pd.attach(m, "0", make(0.5))
    m.eval()
    assert m(x) is x
    m.train()
    assert m(x) is not x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_dtype_and_device_kept(make, dtype):
    x = torch.randn(4, 6, 10, 10, dtype=dtype)
    y = make(0.3)(x)
    assert y.dtype == dtype and y.device == x.device and y.shape == x.shape
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("fmt,shape", [(torch.channels_last, (4, 6, 10, 10)),
                                       (torch.channels_last_3d, (2, 6, 5, 6, 7))])
def test_memory_format_kept(make, fmt, shape):
    x = torch.randn(shape).to(memory_format=fmt).requires_grad_()
    y = make(0.3)(x)
    assert y.is_contiguous(memory_format=fmt)
    y.backward(torch.randn_like(y).to(memory_format=fmt))
    assert x.grad.is_contiguous(memory_format=fmt)


def test_autocast(make):
    x = torch.randn(4, 6, 10, 10)
    conv = nn.Conv2d(6, 6, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = conv(x)
        y = make(0.3)(h)
    assert y.dtype == h.dtype == torch.bfloat16


def test_gradients_flow_through_the_mask(make):
    x = torch.randn(4, 6, 10, 10, requires_grad=True)
    torch.manual_seed(1)
    y = make(0.3)(x)
    y.backward(torch.ones_like(y))
    # d(out)/d(x) is the multiplier: out / x wherever x is not zero (noise: 1).
    torch.manual_seed(1)
    y2 = make(0.3)(x.detach())
    if isinstance(make(0.3), pd.GaussianNoise):
        assert torch.equal(x.grad, torch.ones_like(x))
    else:
        assert torch.allclose(x.grad, y2 / x.detach(), rtol=1e-5, atol=1e-6)
    assert y.grad_fn is not None


def test_deepcopy_and_pickle(make):
    m = _model().train()
    pd.attach(m, "0", make(pd.linear(0.0, 0.3, steps=10))).step(5)
    for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        rows = pd.summary(clone)
        assert len(rows) == 1 and rows[0].step == 5
        x = torch.randn(2, 3, 8, 8)
        torch.manual_seed(2)
        a = clone(x)
        torch.manual_seed(2)
        b = m(x)
        assert torch.equal(a, b)


class _CountingBackend:
    def __init__(self):
        self.compiles = 0

    def __call__(self, gm, example_inputs):
        self.compiles += 1
        return gm.forward


def test_compile_follows_schedule_without_recompiling(make):
    torch._dynamo.reset()
    m = _model().train()
    t = make(pd.linear(0.0, 0.4, steps=12))
    h = pd.attach(m, "0", t)
    h.step()  # p > 0 from the start, so the first trace takes the active path
    backend = _CountingBackend()
    cm = torch.compile(m, backend=backend, fullgraph=True)
    x = torch.ones(4, 3, 10, 10)
    for _ in range(12):
        cm(x)
        h.step()
    assert backend.compiles == 1
    # The compiled model follows the value: at p = 0.4 something is dropped / noised.
    ref = _model()
    ref.load_state_dict(m.state_dict())
    assert not torch.equal(cm(x), ref(x))
    torch._dynamo.reset()


# --------------------------------------------------------------------- per-transform stats


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


def test_gaussian_noise_moments():
    x = torch.full((1000, 1000), 2.0)
    n = pd.functional.gaussian_noise(x, 0.5) - x
    assert abs(n.mean().item()) < 5 * 0.5 / 1000
    assert abs(n.std().item() - 0.5) < 0.01
    m = pd.functional.gaussian_noise(x, 0.5, multiplicative=True) / x - 1
    assert abs(m.std().item() - 0.5) < 0.01

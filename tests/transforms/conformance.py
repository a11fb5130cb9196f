"""The conformance suite every transform inherits (in the way kornia's augmentation tests do).

A transform's test class derives from :class:`ForwardConformance`, :class:`GradientConformance`
or :class:`CoordinatedConformance` and says how to build the transform with a value of its main
numeric setting (``make``); it then adds its own statistical or hand-computed tests. Every
inherited test must hold for every transform: a new transform that breaks one fails here.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from conftest import memory_layouts

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
DEVICES = [pytest.param("cpu"),
           pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                         reason="needs a CUDA device"))]
#: Inputs of the memory-layout tests: a small map, one of 65,536 elements (where Dropout2d on
#: small maps, the noise kernel and the sparse draws start), a 3-D map.
LAYOUT_SHAPES = [(4, 6, 10, 10), (16, 64, 8, 8), (2, 6, 5, 6, 8)]
INTEGERS = [torch.int64, torch.int32, torch.uint8, torch.bool]


def same_in_every_layout(f: Any, shape: tuple[int, ...], device: str, calls: int = 1,
                         exact: bool = True) -> None:
    """``f(x)`` and its input gradient, seeded, are bit-identical for every memory order of
    the same ``x`` (and the same upstream gradient, in the same order), ``calls`` times each;
    with ``exact=False`` equal to rounding (a norm sums in memory order)."""
    x0 = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(device)
    w0 = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(device)
    results = {}
    for (name, x), w in zip(memory_layouts(x0).items(), memory_layouts(w0).values()):
        for call in range(calls):
            x = x.detach().requires_grad_()
            torch.manual_seed(7)
            y = f(x)
            (g,) = torch.autograd.grad(y, x, w)
            results[name, call] = (y.detach(), g)
    want, want_grad = results["contiguous", 0]

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        return torch.equal(a, b) if exact else torch.allclose(a, b, rtol=1e-5, atol=1e-7)

    moved = [f"{name} (call {call + 1}): {'output' if not same(y, want) else 'gradient'}"
             for (name, call), (y, g) in results.items()
             if not (same(y, want) and same(g, want_grad))]
    assert not moved, f"another draw than for the contiguous input: {', '.join(moved)}"


def conv_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 6, 3, padding=1))


class _CountingBackend:
    """A torch.compile backend that counts its compilations (and runs the graph as is)."""

    def __init__(self) -> None:
        self.compiles = 0

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        self.compiles += 1
        return gm.forward


class TransformConformance:
    """What every transform does: settings checked, schedules stepped and restored, copies."""

    setting = "p"          #: the main numeric setting
    value = 0.3            #: a valid, active value of it
    bad_value = -1.0       #: an invalid one
    input_shape = (4, 6, 10, 10)
    ramp_start = 0.0       #: a valid start of a ramp to ``value``
    where = "output"       #: where it attaches ("params": parameter-gradient transforms)

    @property
    def params(self) -> bool:
        return self.where == "params"

    def one_layer(self) -> nn.Module:
        """A model whose layer "0" takes the transform."""
        return nn.Sequential(nn.Linear(3, 3) if self.params else nn.Identity())

    @property
    def conv_layer(self) -> str:
        """The layer of :func:`conv_model` that takes it (the ReLU; a conv for parameters)."""
        return "0" if self.params else "1"

    def make(self, value: Any) -> pd.Transform:  # pragma: no cover - each subclass says
        raise NotImplementedError

    def test_bad_setting_raises_a_setting_error(self):
        with pytest.raises(pd.SettingError, match=self.setting):
            self.make(self.bad_value)
        with pytest.raises(TypeError):
            self.make("0.1")

    def test_schedule_reaching_a_bad_value_raises_at_that_step(self):
        value, bad = self.value, self.bad_value
        t = self.make(lambda step: value if step < 3 else bad)
        h = pd.attach(self.one_layer(), "0", t, where=self.where)
        h.step(2)
        with pytest.raises(pd.SettingError, match="at step 3"):
            h.step()

    def test_repr_and_values_name_the_setting(self):
        t = self.make(pd.linear(self.ramp_start, self.value, steps=10))
        assert self.setting in repr(t) and type(t).__name__ in repr(t)
        assert t.values() == {**t.values(), self.setting: self.ramp_start}

    def test_state_dict_resumes_the_schedule(self):
        h = pd.attach(self.one_layer(), "0",
                      self.make(pd.linear(self.ramp_start, self.value, steps=10)),
                      where=self.where)
        h.step(4)
        state = h.state_dict()
        fresh = pd.attach(self.one_layer(), "0",
                          self.make(pd.linear(self.ramp_start, self.value, steps=10)),
                          where=self.where)
        fresh.load_state_dict(state)
        assert fresh.step_count == 4 and fresh.transform.values() == h.transform.values()

    def test_copies_keep_the_attachment_and_its_step(self):
        m = conv_model().train()
        pd.attach(m, self.conv_layer, self.make(pd.linear(self.ramp_start, self.value, steps=10)),
                  where=self.where).step(5)
        for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
            rows = [r for r in pd.summary(clone) if r.kind == "transform"]
            assert len(rows) == 1 and rows[0].step == 5
            (h,) = pd.handles(clone)
            assert h.step_count == 5 and h.layers == [self.conv_layer]
            h.remove()
            assert not pd.summary(clone)


class ForwardConformance(TransformConformance):
    """What every forward transform does to activations."""

    def test_zero_is_the_identity(self):
        m = conv_model().train()
        x = torch.randn(self.input_shape[0], 3, *self.input_shape[2:])
        ref = m(x)
        with pd.attach(m, "0", self.make(0.0)):
            assert torch.equal(m(x), ref)

    def test_eval_returns_the_very_same_tensor(self):
        m = nn.Sequential(nn.Identity())
        x = torch.randn(self.input_shape)
        pd.attach(m, "0", self.make(self.value))
        assert m.eval()(x) is x
        assert m.train()(x) is not x

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_dtype_device_and_shape_kept(self, dtype):
        x = torch.randn(self.input_shape, dtype=dtype)
        y = self.make(self.value)(x)
        assert (y.dtype, y.device, y.shape) == (dtype, x.device, x.shape)
        assert torch.isfinite(y).all()

    @pytest.mark.parametrize("fmt,shape", [(torch.channels_last, (4, 6, 10, 10)),
                                           (torch.channels_last_3d, (2, 6, 5, 6, 7))])
    def test_memory_format_kept_forward_and_backward(self, fmt, shape):
        x = torch.randn(shape).to(memory_format=fmt).requires_grad_()
        y = self.make(self.value)(x)
        assert y.is_contiguous(memory_format=fmt)
        y.backward(torch.randn_like(y).to(memory_format=fmt))
        assert x.grad is not None and x.grad.is_contiguous(memory_format=fmt)

    @pytest.mark.parametrize("device", DEVICES)
    @pytest.mark.parametrize("shape", LAYOUT_SHAPES)
    def test_same_seed_same_mask_in_every_memory_layout(self, shape, device):
        same_in_every_layout(self.make(self.value), shape, device)

    @pytest.mark.parametrize("device", DEVICES)
    @pytest.mark.parametrize("shape", LAYOUT_SHAPES)
    def test_same_seed_same_mask_in_every_memory_layout_through_hooks(self, shape, device):
        # twice per layout: the second call of a shape takes the hooks' cached fast paths
        m = nn.Sequential(nn.Identity()).train()
        pd.attach(m, "0", self.make(self.value))
        same_in_every_layout(m, shape, device, calls=2)

    @pytest.mark.parametrize("dtype", INTEGERS)
    def test_integer_and_boolean_inputs_raise_a_type_error(self, dtype):
        x = torch.ones(self.input_shape, dtype=dtype)
        name = type(self.make(self.value)).__name__
        with pytest.raises(TypeError, match=f"{name} acts on floating-point.*{dtype}"):
            self.make(self.value)(x)
        m = nn.Sequential(nn.Identity()).train()
        pd.attach(m, "0", self.make(self.value))
        for _ in range(2):  # the hooks' fast paths too, once a float tensor of the shape ran
            with pytest.raises(TypeError, match=f"layer '0'.*floating-point.*{dtype}"):
                m(x)
            m(torch.ones(self.input_shape))

    def test_autocast_keeps_the_autocast_dtype(self):
        conv = nn.Conv2d(6, 6, 1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = conv(torch.randn(self.input_shape))
            y = self.make(self.value)(h)
        assert y.dtype == h.dtype == torch.bfloat16

    def seeded(self, value: Any) -> Any:
        """The transform as a deterministic function of ``x``: the same mask at every call
        (gradcheck and ``torch.func`` call it many times)."""
        t = self.make(value)

        def f(x: torch.Tensor) -> torch.Tensor:
            with torch.random.fork_rng():
                torch.manual_seed(5)
                return t(x)
        return f

    def test_differentiable_twice(self):
        x = torch.randn(self.input_shape, dtype=torch.float64, requires_grad=True)
        f = self.seeded(self.value)
        assert torch.autograd.gradcheck(f, (x,), fast_mode=True)
        assert torch.autograd.gradgradcheck(f, (x,), fast_mode=True)
        # A Hessian-vector product through the transform (here of sum(f(x)**2)).
        v = torch.randn_like(x)
        (g,) = torch.autograd.grad(f(x).square().sum(), x, create_graph=True)
        (hv,) = torch.autograd.grad(g, x, v)
        m = self.multiplier(x.detach(), f(x.detach()))
        assert torch.allclose(hv, 2 * m * m * v)

    def test_forward_mode_jvp_is_the_transposed_vjp(self):
        x = torch.randn(self.input_shape, dtype=torch.float64)
        v, u = torch.randn_like(x), torch.randn_like(x)
        f = self.seeded(self.value)
        y, jv = torch.func.jvp(f, (x,), (v,))
        y2, vjp = torch.func.vjp(f, x)
        (jtu,) = vjp(u)
        assert torch.equal(y, y2) and torch.equal(y, f(x))
        assert torch.allclose((u * jv).sum(), (jtu * v).sum())
        with torch.autograd.forward_ad.dual_level():
            dual = torch.autograd.forward_ad.make_dual(x, v)
            tangent = torch.autograd.forward_ad.unpack_dual(f(dual)).tangent
        assert torch.allclose(tangent, jv)

    def multiplier(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """d(out)/d(x), elementwise, for the forward that gave ``y`` (a mask: ``y / x``)."""
        return y / x

    def test_gradients_flow_through_the_mask(self):
        x = torch.randn(self.input_shape, requires_grad=True)
        torch.manual_seed(1)
        y = self.make(self.value)(x)
        assert y.grad_fn is not None
        y.backward(torch.ones_like(y))
        torch.manual_seed(1)
        y2 = self.make(self.value)(x.detach())
        assert x.grad is not None
        assert torch.allclose(x.grad, self.multiplier(x.detach(), y2), rtol=1e-5, atol=1e-6)

    def test_a_copy_draws_the_same_masks_as_the_original(self):
        m = conv_model().train()
        pd.attach(m, "0", self.make(pd.linear(0.0, self.value, steps=10))).step(5)
        x = torch.randn(2, 3, 8, 8)
        for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
            torch.manual_seed(2)
            a = clone(x)
            torch.manual_seed(2)
            assert torch.equal(a, m(x))

    def test_compile_follows_a_schedule_in_one_graph(self):
        torch._dynamo.reset()
        m = conv_model().train()
        h = pd.attach(m, "0", self.make(pd.linear(0.0, self.value, steps=12)))
        h.step()  # active from the first trace
        backend = _CountingBackend()
        cm = torch.compile(m, backend=backend, fullgraph=True)
        x = torch.ones(4, 3, 10, 10)
        for _ in range(12):
            cm(x)
            h.step()
        assert backend.compiles == 1
        ref = conv_model()
        ref.load_state_dict(m.state_dict())
        assert not torch.equal(cm(x), ref(x))  # the compiled model follows the value
        torch._dynamo.reset()


class GradientConformance(TransformConformance):
    """What every gradient transform does: gradients changed as computed by hand, forward
    values bit-identical, nothing at all without autograd."""

    value = 0.5
    bad_value = -1.0
    ramp_start = 0.1

    def expected(self, g: torch.Tensor, value: float, per_sample: bool) -> torch.Tensor:
        """The transformed gradient, by hand (deterministic transforms)."""
        raise NotImplementedError  # pragma: no cover

    deterministic = True

    def _grads(self, where: str) -> tuple[torch.Tensor, torch.Tensor, nn.Module]:
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(5, 5), nn.Identity(), nn.Linear(5, 3))
        x = torch.randn(7, 5)
        m(x).square().sum().backward()
        ref = (m[0].weight.grad if where == "params" else m[0].weight.grad).clone()
        m.zero_grad()
        return x, ref, m

    def test_forward_values_are_bit_identical(self):
        m = conv_model().train()
        x = torch.randn(2, 3, 8, 8, requires_grad=True)
        ref = m(x)
        with pd.attach(m, self.conv_layer, self.make(self.value), where=self.where):
            assert torch.equal(m(x), ref)

    def test_nothing_happens_without_autograd(self):
        m = nn.Sequential(nn.Linear(3, 3), nn.Identity())
        pd.attach(m, "0" if self.params else "1", self.make(self.value), where=self.where)
        with torch.no_grad():
            m(torch.randn(2, 3))
        with torch.inference_mode():
            m(torch.randn(2, 3))

    def test_activation_gradient_as_by_hand(self):
        if self.params:
            pytest.skip("a parameter-gradient transform: does not attach to activations")
        if not self.deterministic:
            pytest.skip("random transform: its statistics are tested on their own")
        x = torch.randn(6, 4, requires_grad=True)
        lin = nn.Linear(4, 4)
        m = nn.Sequential(lin, nn.Identity())
        g = torch.randn(6, 4) * 3
        pd.attach(m, "1", self.make(self.value))
        m(x).backward(g)
        h = x.detach().clone().requires_grad_()
        lin(h).backward(self.expected(g, self.value, per_sample=True))
        assert torch.allclose(x.grad, h.grad, atol=1e-6)

    def test_parameter_gradients_as_by_hand(self):
        if not self.deterministic:
            pytest.skip("random transform: its statistics are tested on their own")
        x, ref, m = self._grads("params")
        pd.attach(m, "0", self.make(self.value), where="params")
        m(x).square().sum().backward()
        want = self.expected_param(ref, self.value, m[0].weight.detach())
        assert torch.allclose(m[0].weight.grad, want, atol=1e-6)

    def expected_param(self, g: torch.Tensor, value: float, param: torch.Tensor
                       ) -> torch.Tensor:
        """The transformed gradient of ``param``, by hand (default: as a whole tensor)."""
        return self.expected(g, value, per_sample=False)

    def transform_grad(self, t: pd.Transform, g: torch.Tensor) -> torch.Tensor:
        """``t`` applied to a gradient (of an activation; of a parameter for ``params``)."""
        if self.params:
            return t._call_param(g, None, torch.randn_like(g))
        return t(g)

    @pytest.mark.parametrize("device", DEVICES)
    @pytest.mark.parametrize("shape", LAYOUT_SHAPES)
    def test_same_seed_same_gradient_in_every_memory_layout(self, shape, device):
        if self.params:
            pytest.skip("a parameter-gradient transform: does not attach to activations")
        m = nn.Sequential(nn.Identity())
        pd.attach(m, "0", self.make(self.value))
        # random noise: bit-identical; the others reduce (norms) in memory order
        same_in_every_layout(m, shape, device, exact=not self.deterministic)

    @pytest.mark.parametrize("dtype", INTEGERS)
    def test_integer_and_boolean_inputs_raise_a_type_error(self, dtype):
        g = torch.ones(4, 6, dtype=dtype)
        name = type(self.make(self.value)).__name__
        with pytest.raises(TypeError, match=f"{name} acts on floating-point.*{dtype}"):
            self.make(self.value)(g)

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
    def test_gradient_dtype_kept(self, dtype):
        g = torch.randn(4, 6, dtype=dtype)
        out = self.transform_grad(self.make(self.value), g)
        assert out.dtype == dtype and out.shape == g.shape and torch.isfinite(out).all()


class CoordinatedConformance(TransformConformance):
    """What every coordinated transform (one decision per forward, targets mixed by the
    handle) does."""

    setting = "alpha"
    value = 1.0
    bad_value = -1.0

    def _model(self) -> nn.Module:
        return nn.Sequential(nn.Identity(), nn.Linear(4, 4), nn.Identity(), nn.Linear(4, 3))

    def test_zero_is_the_identity(self):
        m = self._model().train()
        x = torch.randn(6, 4)
        ref = m(x)
        h = pd.attach(m, ["", "0", "2"], self.make(0.0))
        assert torch.equal(m(x), ref) and h.lam is None

    def test_eval_returns_the_same_values(self):
        m = self._model()
        x = torch.randn(6, 4)
        h = pd.attach(m, ["0", "2"], self.make(self.value))
        m.train()(x)
        assert h.lam is not None
        assert torch.equal(m.eval()(x), m[3](m[1](x))) and h.lam is None

    def test_handle_is_a_mixup_handle_and_loss_mixes_targets(self):
        m = self._model().train()
        h = pd.attach(m, ["0", "2"], self.make(self.value))
        assert isinstance(h, pd.MixupHandle)
        y = torch.randint(0, 3, (6,))
        logits = m(torch.randn(6, 4))
        ce = torch.nn.functional.cross_entropy
        want = h.lam * ce(logits, y) + (1 - h.lam) * ce(logits, y[h.index])
        assert torch.allclose(h.loss(ce, logits, y), want)

    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
    def test_dtype_kept_and_gradients_flow(self, dtype):
        m = nn.Sequential(nn.Identity(), nn.Identity()).train()
        h = pd.attach(m, ["0"], self.make(self.value))
        x = torch.randn(6, 4, dtype=dtype, requires_grad=True)
        y = m(x)
        assert y.dtype == dtype and h.layer == "0"
        y.sum().backward()
        assert x.grad is not None and torch.isfinite(x.grad).all()

    @pytest.mark.parametrize("dtype", INTEGERS)
    def test_integer_and_boolean_inputs_raise_a_type_error(self, dtype):
        m = nn.Sequential(nn.Identity(), nn.Identity()).train()
        pd.attach(m, ["0", "1"], self.make(self.value))
        with pytest.raises(TypeError, match=f"layer '.'.*floating-point.*{dtype}"):
            m(torch.ones(6, 4, dtype=dtype))

    def test_copies_keep_the_attachment_and_its_step(self):
        m = self._model().train()
        ramp = pd.linear(self.ramp_start, self.value, steps=5)  # at its end after 5 steps
        pd.attach(m, ["0", "2"], self.make(ramp)).step(5)
        for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
            (h,) = pd.handles(clone)
            assert isinstance(h, pd.MixupHandle) and h.step_count == 5
            assert h.layers == ["0", "2"]
            clone(torch.randn(6, 4))
            assert h.layer in ("0", "2")

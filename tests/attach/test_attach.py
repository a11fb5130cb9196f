"""Attachment: handles, restoration, where=, structured outputs, gradient transforms, copies,
schedules bound to optimizers, and errors."""

import copy
import io
import pickle

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from conftest import Net


def _hook_count(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _train_out(model, x, seed=5):
    torch.manual_seed(seed)
    return model(x)


# ------------------------------------------------------------------- attach / remove / detach


def test_handle_lists_layers_and_remove_restores_exactly(net):
    net.train()
    x = torch.randn(4, 3, 12, 12)
    before = _train_out(net, x)
    h = pd.attach(net, "layer1.*", pd.DropBlock(0.3, block_size=3))
    assert h.layers == ["layer1.0", "layer1.1"]
    assert not torch.equal(_train_out(net, x), before)
    h.remove()
    assert torch.equal(_train_out(net, x), before)
    assert _hook_count(net) == 0
    h.remove()  # idempotent


def test_context_manager(net):
    with pd.attach(net, "layer2.*", pd.Dropout2d(0.5)) as h:
        assert h.attached and _hook_count(net) == 2
    assert not h.attached and _hook_count(net) == 0


def test_detach_removes_everything_and_counts(net):
    pd.attach(net, "layer1.*", pd.DropBlock(0.1, 3))
    pd.attach(net, "fc", pd.ClipGradNorm(1.0), where="params")
    pd.attach(net, "fc", pd.ScaleGrad(0.5), where="input")
    assert len(pd.summary(net)) == 4
    assert pd.detach(net) == 4
    assert len(pd.summary(net)) == 0 and _hook_count(net) == 0
    assert all(not p._backward_hooks for p in net.parameters())
    assert pd.detach(net) == 0


def test_state_dict_keys_unchanged(net):
    keys = list(net.state_dict())
    n_params = len(list(net.parameters()))
    pd.attach(net, "layer1.*", pd.DropBlock(pd.linear(0, 0.1, 10), 3))
    pd.attach(net, "fc", pd.ClipGradNorm(1.0), where="params")
    assert list(net.state_dict()) == keys
    assert len(list(net.parameters())) == n_params
    bare = Net()
    bare.load_state_dict(net.state_dict())  # checkpoints load into the bare model and back
    net.load_state_dict(bare.state_dict())


def test_eval_output_is_bit_identical(net):
    x = torch.randn(4, 3, 12, 12)
    net.eval()
    ref = net(x)
    pd.attach(net, "**.conv", pd.DropBlock(0.5, 3))
    pd.attach(net, "layer1", pd.GaussianNoise(1.0))
    assert torch.equal(net(x), ref)


def test_stacking_on_one_layer_applies_in_order():
    m = nn.Sequential(nn.Identity())
    pd.attach(m, "0", pd.GaussianNoise(1.0))
    pd.attach(m, "0", pd.DropPath(0.5, scale_by_keep=False))
    x = torch.ones(2000, 3)
    y = m.train()(x)
    # noise first, then whole samples zeroed: zeroed rows are exactly zero.
    rows = (y == 0).all(1)
    assert 0.4 < rows.float().mean() < 0.6
    assert (y[~rows] != 1).all()


def test_same_transform_object_cannot_be_attached_twice(net):
    t = pd.Dropout(0.1)
    h = pd.attach(net, "fc", t)
    with pytest.raises(ValueError, match="already attached"):
        pd.attach(net, "stem", t)
    h.remove()
    pd.attach(net, "stem", t)  # free again after remove


def test_shared_module_gets_the_transform_at_each_call():
    shared = nn.Identity()

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = shared

        def forward(self, x):
            return self.m(x) + self.m(x)

    model = Twice().train()
    pd.attach(model, "m", pd.DropPath(0.5, scale_by_keep=False))
    y = model(torch.ones(4000, 1))
    # Two independent draws: 0, 1 or 2 with probabilities 1/4, 1/2, 1/4.
    frac_two = (y == 2).float().mean().item()
    frac_zero = (y == 0).float().mean().item()
    assert abs(frac_two - 0.25) < 0.04 and abs(frac_zero - 0.25) < 0.04


def test_root_module_and_nested_selection(net):
    x = torch.randn(8, 3, 8, 8)
    with pytest.warns(pd.NotResidualWarning, match="''"):  # the root is no residual branch
        h = pd.attach(net, "", pd.DropPath(0.5, scale_by_keep=False))
    y = net.train()(x)
    assert ((y == 0).all(1) | (y != 0).all(1)).all()
    h.remove()
    h = pd.attach(net, ["layer1", "layer1.0"], pd.Dropout(0.2))
    assert h.layers == ["layer1", "layer1.0"]


# --------------------------------------------------------------------------------- where=


def test_where_input_acts_on_the_first_positional_input():
    lin = nn.Linear(6, 1, bias=False)
    nn.init.ones_(lin.weight)
    m = nn.Sequential(lin)
    pd.attach(m, "0", pd.DropPath(0.5, scale_by_keep=False), where="input")
    y = m.train()(torch.ones(3000, 6))
    assert set(y.flatten().unique().tolist()) == {0.0, 6.0}


class KwModule(nn.Module):
    def forward(self, x, *, scale):
        return x * scale


def test_where_input_keyword_element():
    m = nn.Sequential()
    m.add_module("k", KwModule())
    pd.attach(m, "k", pd.DropPath(0.5, scale_by_keep=False), where="input", element="scale")
    x = torch.ones(2000, 2)
    y = m.k(x, scale=torch.ones(2000, 1))
    assert 0.4 < (y == 0).all(1).float().mean() < 0.6
    h2 = pd.attach(m, "k", pd.Dropout(0.1), where="input")  # no positional input at all
    with pytest.raises(ValueError, match="no positional input 0"):
        m.k(scale=torch.ones(2, 1), x=x)
    h2.remove()


def test_tuple_output_first_tensor_and_named_element():
    lstm = nn.LSTM(4, 8, batch_first=True)
    m = nn.Sequential()
    m.add_module("lstm", lstm)
    x = torch.randn(50, 5, 4)
    ref_out, (ref_h, ref_c) = lstm(x)
    h = pd.attach(m, "lstm", pd.DropPath(0.5, scale_by_keep=False))
    lstm.train()
    out, (hn, cn) = lstm(x)
    assert torch.equal(hn, ref_h) and torch.equal(cn, ref_c)  # other elements untouched
    assert ((out == 0).flatten(1).all(1)).any()
    h.remove()


def test_multihead_attention_output():
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    wrap = nn.Module()
    wrap.attn = mha
    x = torch.randn(20, 5, 8)
    ref_out, ref_w = mha(x, x, x)
    pd.attach(wrap, "attn", pd.DropPath(0.5, scale_by_keep=False))
    out, w = mha.train()(x, x, x)
    assert torch.equal(w, ref_w)
    dropped = (out == 0).flatten(1).all(1)
    assert dropped.any() and torch.equal(out[~dropped], ref_out[~dropped])


class DictOut(nn.Module):
    def forward(self, x):
        return {"meta": "x", "feat": x * 1, "aux": x * 2}


def test_dict_output_default_and_named():
    m = nn.Sequential()
    m.add_module("d", DictOut())
    x = torch.ones(1000, 3)
    h = pd.attach(m, "d", pd.DropPath(0.5, scale_by_keep=False))
    out = m.train()(x)
    assert out["meta"] == "x" and torch.equal(out["aux"], x * 2)
    assert 0.4 < (out["feat"] == 0).all(1).float().mean() < 0.6
    h.remove()
    pd.attach(m, "d", pd.DropPath(0.5, scale_by_keep=False), element="aux")
    out = m(x)
    assert torch.equal(out["feat"], x)
    pd.detach(m)
    pd.attach(m, "d", pd.Dropout(0.5), element="nope")
    with pytest.raises(ValueError, match="element='nope'"):
        m(x)


# ---------------------------------------------------------------------- gradient transforms


def _chain():
    """a -> marker (Identity) -> b; gradient transforms attach to the marker's output."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 6), nn.Identity(), nn.Linear(6, 3))


def _grads(model, x, target):
    model.zero_grad()
    h = model[0](x)
    h.retain_grad()
    out = model[2](model[1](h))
    loss = ((out - target) ** 2).sum()
    loss.backward()
    return out.detach(), h.grad.clone(), model[0].weight.grad.clone()


@pytest.mark.parametrize("transform,expect", [
    (lambda: pd.ScaleGrad(-0.5), lambda g: -0.5 * g),
    (lambda: pd.ClipGradValue(0.3), lambda g: g.clamp(-0.3, 0.3)),
    (lambda: pd.ClipGradNorm(0.5), lambda g: g * (0.5 / (g.norm(dim=1, keepdim=True) + 1e-6))
     .clamp(max=1.0)),
])
def test_gradient_transform_on_activation(transform, expect):
    m = _chain()
    x, t = torch.randn(7, 5), torch.randn(7, 3)
    out0, g_h, _ = _grads(m, x, t)
    # With the transform, the gradient reaching layer 0 is expect(dL/dh).
    pd.attach(m, "1", transform())
    m.zero_grad()
    out1 = m(x)
    ((out1 - t) ** 2).sum().backward()
    assert torch.equal(out1.detach(), out0)  # forward bit-identical
    assert torch.allclose(m[0].weight.grad, expect(g_h).t() @ x, atol=1e-6)


def test_clip_grad_norm_per_sample_bounds_each_row():
    g = torch.randn(16, 3, 4, 4) * torch.linspace(0.01, 10, 16).view(-1, 1, 1, 1)
    out = pd.ClipGradNorm(1.0)(g)
    norms = out.flatten(1).norm(dim=1)
    assert (norms <= 1.0 + 1e-5).all()
    small = g.flatten(1).norm(dim=1) <= 1.0
    assert torch.equal(out[small], g[small])


def test_grad_noise_statistics():
    g = torch.zeros(1000, 1000)
    n = pd.GradNoise(0.1)(g)
    assert abs(n.std().item() - 0.1) < 0.002 and abs(n.mean().item()) < 0.001


def test_where_params_clips_each_parameter_tensor():
    m = _chain()
    x, t = torch.randn(7, 5) * 10, torch.randn(7, 3)
    h = pd.attach(m, "0", pd.ClipGradNorm(0.01), where="params")
    out = m(x)
    ((out - t) ** 2).sum().backward()
    assert m[0].weight.grad.norm() <= 0.01 + 1e-6
    assert m[0].bias.grad.norm() <= 0.01 + 1e-6
    assert m[2].weight.grad.norm() > 0.1  # other layers untouched
    h.remove()
    m.zero_grad()
    ((m(x) - t) ** 2).sum().backward()
    assert m[0].weight.grad.norm() > 0.1


def test_where_params_scale_value_and_noise():
    m = _chain()
    x, t = torch.randn(7, 5), torch.randn(7, 3)
    _, _, ref = _grads(m, x, t)
    pd.attach(m, "0", pd.ScaleGrad(-2.0), where="params")
    _, _, got = _grads(m, x, t)
    assert torch.allclose(got, -2 * ref)
    pd.detach(m)
    pd.attach(m, "0", pd.ClipGradValue(1e-3), where="params")
    _, _, got = _grads(m, x, t)
    assert got.abs().max() <= 1e-3


def test_where_params_survives_copies():
    m = _chain()
    pd.attach(m, "0", pd.ScaleGrad(0.0), where="params")
    x, t = torch.randn(7, 5), torch.randn(7, 3)
    for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        ((clone(x) - t) ** 2).sum().backward()
        assert torch.count_nonzero(clone[0].weight.grad) == 0
        assert torch.count_nonzero(clone[2].weight.grad) > 0
        assert pd.detach(clone) == 1
        clone.zero_grad()
        ((clone(x) - t) ** 2).sum().backward()
        assert torch.count_nonzero(clone[0].weight.grad) > 0


def test_gradient_transforms_do_nothing_without_autograd():
    m = _chain()
    pd.attach(m, "1", pd.ClipGradNorm(0.1))
    pd.attach(m, "0", pd.ScaleGrad(2.0), where="params")
    x = torch.randn(3, 5)
    with torch.no_grad():
        a = m(x)
    with torch.inference_mode():
        b = m(x)
    assert torch.equal(a, b)


def test_gradient_hook_sees_gradient_before_an_inplace_consumer():
    m = nn.Sequential(nn.Linear(4, 4), nn.Identity(), nn.ReLU(inplace=True))
    pd.attach(m, "1", pd.ScaleGrad(3.0))
    x = torch.randn(6, 4)
    m(x).sum().backward()
    g3 = m[0].weight.grad.clone()
    pd.detach(m)
    m.zero_grad()
    m(x).sum().backward()
    assert torch.allclose(g3, 3 * m[0].weight.grad)


# ------------------------------------------------------------------ copies and serialization


def test_deepcopy_pickle_and_torch_save(net):
    h = pd.attach(net, "layer1.*", pd.DropBlock(pd.linear(0.0, 0.2, steps=10), 3))
    h.step(4)
    buf = io.BytesIO()
    torch.save(net, buf)
    buf.seek(0)
    copies = [copy.deepcopy(net), pickle.loads(pickle.dumps(net)),
              torch.load(buf, weights_only=False)]
    x = torch.randn(2, 3, 10, 10)
    for c in copies:
        rows = pd.summary(c)
        assert [r.layer for r in rows] == ["layer1.0", "layer1.1"]
        assert rows[0].values["p"] == pytest.approx(0.08)
        assert torch.equal(_train_out(c.train(), x), _train_out(net.train(), x))
        assert pd.detach(c) == 2
    assert len(pd.summary(net)) == 2  # the original is untouched


# ------------------------------------------------------------------------------ schedules


def test_step_bind_and_state_dict(net):
    t = pd.DropBlock(pd.linear(0.0, 0.1, steps=10), 3)
    h = pd.attach(net, "layer1.*", t)
    assert t.p == 0.0 and h.step_count == 0
    h.step(3)
    assert t.p == pytest.approx(0.03)
    opt = torch.optim.SGD(net.parameters(), lr=0.0)
    h.bind(opt)
    for _ in range(2):
        opt.step()
    assert h.step_count == 5 and t.p == pytest.approx(0.05)
    state = h.state_dict()
    assert state == {"step": 5}

    net2 = Net()
    h2 = pd.attach(net2, "layer1.*", pd.DropBlock(pd.linear(0.0, 0.1, steps=10), 3))
    h2.load_state_dict(state)
    assert h2.transform.p == pytest.approx(0.05)
    h2.step(100)
    assert h2.transform.p == pytest.approx(0.1)  # holds its end value
    h.remove()
    opt.step()
    assert h.step_count == 5  # unbound by remove
    with pytest.raises(ValueError, match="'step'"):
        h2.load_state_dict({"steps": 3})


def test_value_tensor_updates_in_place(net):
    t = pd.Dropout(pd.linear(0.0, 0.5, steps=5))
    pd.attach(net, "fc", t).step(0)
    tensor = t._settings["p"].current.get(torch.device("cpu"))
    ptr = tensor.data_ptr()
    pd.summary(net)
    t._set_step(5)
    assert tensor.item() == pytest.approx(0.5) and tensor.data_ptr() == ptr


def test_schedule_reaching_a_bad_value_raises_at_step(net):
    h = pd.attach(net, "fc", pd.Dropout(lambda s: 0.3 * s))
    h.step(3)
    with pytest.raises(ValueError, match=r"p at step 4 .* \[0, 1\)"):
        h.step()


# --------------------------------------------------------------------------------- errors


def test_errors_name_the_problem(net):
    with pytest.raises(TypeError, match="nn.Module"):
        pd.attach("model", "fc", pd.Dropout(0.1))
    with pytest.raises(TypeError, match=r"write DropBlock\(\.\.\.\)"):
        pd.attach(net, "fc", pd.DropBlock)
    with pytest.raises(TypeError, match="plugdrop transform"):
        pd.attach(net, "fc", nn.Dropout(0.1))
    with pytest.raises(ValueError, match="where must be"):
        pd.attach(net, "fc", pd.Dropout(0.1), where="outputs")
    with pytest.raises(ValueError, match="gradient transform"):
        pd.attach(net, "fc", pd.Dropout(0.1), where="params")
    with pytest.raises(ValueError, match="no parameters"):
        pd.attach(net, "pool", pd.ClipGradNorm(1.0), where="params")
    with pytest.raises(TypeError, match="expected a number"):
        pd.DropBlock("0.1")
    with pytest.raises(TypeError, match="schedule"):
        pd.DropBlock(None)
    with pytest.raises(ValueError, match="max_norm"):
        pd.ClipGradNorm(0.0)
    with pytest.raises(ValueError, match="std"):
        pd.GaussianNoise(-1.0)
    with pytest.raises(ValueError, match="layout"):
        pd.DropBlock(0.1, layout="NHWC")
    with pytest.raises(ValueError, match=r"p \(schedule linear"):
        pd.Dropout(pd.linear(0.0, 1.0, steps=10))


def test_failed_attach_leaves_no_hook(net):
    with pytest.raises(ValueError, match="no parameters"):
        pd.attach(net, ["fc", "pool"], pd.ClipGradNorm(1.0), where="params")
    assert _hook_count(net) == 0
    assert all(not p._backward_hooks for p in net.parameters())
    with pytest.raises(ValueError, match="matched no module"):
        pd.attach(net, ["fc", "nope"], pd.Dropout(0.1))
    assert _hook_count(net) == 0


def test_rank_mismatch_is_reported_at_first_forward_with_layer_and_shape(net):
    pd.attach(net, "fc", pd.DropBlock(0.1, 3))
    with pytest.raises(ValueError) as e:
        net.train()(torch.randn(2, 3, 8, 8))
    msg = str(e.value)
    assert "layer 'fc'" in msg and "Linear" in msg and "(2, 5)" in msg and "Dropout" in msg


def test_summary_table(net):
    assert str(pd.summary(net)) == "(no plugdrop attachments)"
    pd.attach(net, "layer1.*", pd.DropBlock(pd.cosine(0.0, 0.1, 100), 5)).step(50)
    pd.attach(net, "fc", pd.ClipGradNorm(1.0), where="params")
    text = str(pd.summary(net))
    assert "layer1.0" in text and "cosine(0, 0.1, steps=100)" in text and "p=0.05" in text
    assert "params" in text and "max_norm=1" in text


# ---------------------------------------------------------------------- compiled models


@pytest.mark.slow
def test_attach_and_remove_after_compile_take_effect(net):
    torch._dynamo.reset()
    net.train()
    cm = torch.compile(net, backend="eager")
    x = torch.randn(4, 3, 8, 8)
    before = _train_out(cm, x)
    h = pd.attach(cm, "layer1.*", pd.Dropout(0.5))
    assert not torch.equal(_train_out(cm, x), before)
    h.remove()
    assert torch.equal(_train_out(cm, x), before)
    torch._dynamo.reset()


def test_attach_to_a_model_compiled_without_hooks_takes_effect():
    # torch.compile(model) traced the bare model: dynamo does not guard on hooks it never saw.
    torch._dynamo.reset()
    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)).train()
    x = torch.randn(64, 4)
    cm = torch.compile(m, backend="eager")
    before = cm(x)
    h = pd.attach(m, "0", pd.DropPath(0.5, scale_by_keep=False))
    assert not torch.equal(cm(x), before)
    h.remove()
    assert torch.equal(cm(x), before)
    torch._dynamo.reset()


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_replays_the_same_mask(reentrant):
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1))
    pd.attach(block, "0", pd.DropBlock(0.3, block_size=3))
    x = torch.randn(2, 4, 10, 10, requires_grad=True)
    grads = []
    for use_ckpt in (False, True):
        block.zero_grad()
        x.grad = None
        torch.manual_seed(7)
        out = checkpoint(block, x, use_reentrant=reentrant) if use_ckpt else block(x)
        out.square().sum().backward()
        grads.append((x.grad.clone(), block[0].weight.grad.clone()))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])


def test_handles_of_a_copy_step_bind_and_remove_its_own_attachments(net):
    pd.attach(net, "layer1.*", pd.DropBlock(pd.linear(0.0, 0.2, steps=10), 3)).step(2)
    pd.attach(net, "fc", pd.ClipGradNorm(1.0), where="params")
    clone = copy.deepcopy(net)
    hs = pd.handles(clone)
    assert [(h.layers, h.where) for h in hs] == [(["layer1.0", "layer1.1"], "output"),
                                                (["fc"], "params")]
    assert hs[0].step_count == 2
    opt = torch.optim.SGD(clone.parameters(), lr=0.0)
    hs[0].bind(opt)
    opt.step()
    assert hs[0].transform.p == pytest.approx(0.06)
    assert pd.summary(net)[0].values["p"] == pytest.approx(0.04)  # the original: own schedule
    hs[0].remove()
    assert [r.layer for r in pd.summary(clone)] == ["fc"]
    hs[1].remove()
    assert len(pd.summary(clone)) == 0 and len(pd.summary(net)) == 3
    clone(torch.randn(2, 3, 8, 8)).sum().backward()
    assert all(not p._backward_hooks for p in clone.parameters())

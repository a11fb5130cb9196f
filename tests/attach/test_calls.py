"""Hooks that prove they ran: per-layer call counts (eager and compiled, no host sync), shown by
summary() and the handle; a warning naming the layers that never ran."""

import warnings

import pytest
import torch
import torch.nn as nn

import plugdrop as pd


class Skipping(nn.Module):
    """A block with a module its forward never calls (as repvgg's unused drop_path)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)
        self.unused = nn.Identity()

    def forward(self, x):
        return self.b(self.a(x))


def test_forward_transforms_count_training_calls_only():
    m = Skipping()
    h = pd.attach(m, ["a", "b", "unused"], pd.Dropout(0.1))
    x = torch.randn(2, 3)
    m.train()(x)
    m(x)
    m.eval()(x)
    assert h.calls == {"a": 2, "b": 2, "unused": 0}
    assert h.never_fired == ["unused"]
    rows = {r.layer: r.calls for r in pd.summary(m)}
    assert rows == {"a": 2, "b": 2, "unused": 0}
    assert "calls" in str(pd.summary(m)) and "calls=4" in repr(h)


def test_gradient_transforms_count_calls_under_autograd_only():
    m = Skipping()
    h = pd.attach(m, "a", pd.ScaleGrad(0.5))
    p = pd.attach(m, "b", pd.ClipGradNorm(1.0), where="params")
    m(torch.randn(2, 3))
    with torch.no_grad():
        m(torch.randn(2, 3))
    assert h.calls == {"a": 1} and p.calls == {"b": 1}


def test_a_bound_handle_warns_about_layers_that_never_ran():
    m = Skipping().train()
    h = pd.attach(m, ["a", "unused"], pd.Dropout(0.1))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    h.bind(opt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            m(torch.randn(2, 3)).sum().backward()
            opt.step()
    fired = [w for w in caught if issubclass(w.category, pd.NeverFiredWarning)]
    assert len(fired) == 1  # once, at the third step
    assert "'unused'" in str(fired[0].message) and "1 of 2" in str(fired[0].message)


def test_no_warning_when_every_layer_ran():
    m = Skipping().train()
    h = pd.attach(m, ["a", "b"], pd.Dropout(0.1))
    m(torch.randn(2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert h.check_fired() == []


@pytest.mark.parametrize("backend", ["counting", "aot_eager"])
def test_compiled_calls_are_counted_in_the_graph(backend):
    torch._dynamo.reset()
    m = Skipping().train()
    h = pd.attach(m, ["a", "b"], pd.Dropout(0.1))
    g = pd.attach(m, "a", pd.ScaleGrad(0.5))

    def counting(gm, example_inputs):
        return gm.forward

    cm = torch.compile(m, backend=counting if backend == "counting" else backend,
                       fullgraph=True)
    for _ in range(3):
        cm(torch.randn(2, 3))
    assert h.calls == {"a": 3, "b": 3} and g.calls == {"a": 3}
    torch._dynamo.reset()


def test_copies_keep_their_own_counts():
    import copy
    m = Skipping().train()
    h = pd.attach(m, "a", pd.Dropout(0.1))
    m(torch.randn(2, 3))
    clone = copy.deepcopy(m)
    clone(torch.randn(2, 3))
    (hc,) = pd.handles(clone)
    assert h.calls == {"a": 1} and hc.calls == {"a": 2}


def test_fused_attention_is_named_as_the_likely_cause():
    timm = pytest.importorskip("timm")
    vit = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2, num_classes=3)
    vit.train()
    h = pd.attach(vit, ["blocks.*.attn.attn_drop", "blocks.*.mlp"], pd.Dropout(0.1))
    fused = vit.blocks[0].attn.fused_attn
    vit(torch.randn(2, 3, 32, 32))
    if not fused:
        pytest.skip("timm's attention is not fused here")
    assert h.never_fired == ["blocks.0.attn.attn_drop", "blocks.1.attn.attn_drop"]
    with pytest.warns(pd.NeverFiredWarning, match="fused attention"):
        h.check_fired()

"""Taking attachments off part of a model: ``detach(model, selector)`` removes what hangs on the
selected layers only (a spanning attachment keeps its other layers), ``is_attached`` says what
hangs where, and both raise the documented errors."""

from __future__ import annotations

import pytest
import torch

import plugdrop as pd


def test_detach_a_selection_keeps_the_rest(net):
    x = torch.randn(2, 3, 8, 8)
    drop = pd.attach(net, "layer1.*", pd.Dropout(0.5))
    clip = pd.attach(net, "layer2.0", pd.ClipGradValue(0.1))
    assert pd.detach(net, "layer1.0") == 1
    assert not pd.is_attached(net, "layer1.0") and pd.is_attached(net, "layer1.1")
    assert pd.is_attached(net, "layer2.0") and clip.attached and drop.attached
    net.train()
    before = drop.calls["layer1.1"]
    net(x)
    assert drop.calls["layer1.0"] == 0 and drop.calls["layer1.1"] == before + 1
    assert [r.layer for r in pd.summary(net)] == ["layer1.1", "layer2.0"]
    assert pd.detach(net, "layer1.*") == 1  # the last layer of the attachment
    assert not drop.attached and not drop.transform._attached  # free to attach again
    pd.attach(net, "layer1.0", drop.transform)
    assert pd.detach(net) == 2 and not pd.is_attached(net)


def test_detach_with_exclude_and_observers(net):
    pd.attach(net, "layer1.*", pd.Dropout(0.5))
    watch = pd.watch(net, "layer2.*")
    assert pd.is_attached(net, "layer2.1")  # observers count
    assert pd.detach(net, exclude="layer1.*") == 2  # the observer's two hooks
    assert [r.layer for r in pd.summary(net)] == ["layer1.0", "layer1.1"]
    watch.remove()  # idempotent after detach
    assert pd.detach(net, "layer*.*", exclude="layer1.1") == 1


def test_detach_the_layers_of_a_coordinated_transform_takes_its_begin_hook(net):
    mix = pd.attach(net, ["layer1", "layer2"], pd.ManifoldMixup(1.0))
    assert pd.detach(net, "layer1") == 1
    assert pd.is_attached(net, "")  # the begin hook stays while layer2 mixes
    net.train()
    torch.manual_seed(0)
    net(torch.randn(4, 3, 8, 8))
    assert mix.layer == "layer2"
    assert pd.detach(net, "layer2") == 2  # its layer and the root's begin hook
    assert not pd.is_attached(net) and not mix.attached


def test_detach_and_is_attached_errors(net):
    with pytest.raises(pd.SelectorError, match="layer1"):
        pd.detach(net, "layr1.*")
    with pytest.raises(pd.SelectorError):
        pd.is_attached(net, "nope")
    with pytest.raises(TypeError, match="is_attached"):
        pd.is_attached("model")  # type: ignore[arg-type]
    assert pd.detach(net, "layer1.*") == 0  # nothing there: nothing removed

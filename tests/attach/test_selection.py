"""Selector semantics: globs on dotted segments, regex, types, predicates, lists, wrappers."""

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from conftest import Block


def test_star_matches_one_segment(net):
    assert pd.select(net, "layer1.*") == ["layer1.0", "layer1.1"]
    assert pd.select(net, "layer*") == ["layer1", "layer2"]
    assert pd.select(net, "*") == ["stem", "layer1", "layer2", "pool", "fc"]


def test_double_star_matches_any_number_of_segments(net):
    assert pd.select(net, "layer1.**.conv") == ["layer1.0.conv", "layer1.1.conv"]
    assert pd.select(net, "**.conv") == [f"layer{i}.{j}.conv" for i in (1, 2) for j in (0, 1)]
    # zero segments included
    assert pd.select(net, "layer1.**")[:2] == ["layer1", "layer1.0"]
    assert pd.select(net, "**") == [n for n, _ in net.named_modules()]


def test_question_mark_and_brackets(net):
    assert pd.select(net, "layer?.0") == ["layer1.0", "layer2.0"]
    assert pd.select(net, "layer[2].[01]") == ["layer2.0", "layer2.1"]
    assert pd.select(net, "layer[!1].0") == ["layer2.0"]


def test_root_is_the_empty_name(net):
    assert pd.select(net, "") == [""]


def test_regex_is_a_full_match(net):
    assert pd.select(net, r"re:layer\d\.1") == ["layer1.1", "layer2.1"]
    assert pd.select(net, r"re:layer\d\.1\..*") == [
        "layer1.1.conv", "layer1.1.bn", "layer1.1.act",
        "layer2.1.conv", "layer2.1.bn", "layer2.1.act"]
    with pytest.raises(ValueError, match="regular expression"):
        pd.select(net, "re:layer(")


def test_types_predicates_and_lists(net):
    assert pd.select(net, nn.BatchNorm2d) == [f"layer{i}.{j}.bn" for i in (1, 2) for j in (0, 1)]
    assert pd.select(net, (nn.Linear, nn.AdaptiveAvgPool2d)) == ["pool", "fc"]
    assert pd.select(net, lambda name, m: name.endswith(".1") and isinstance(m, Block)) == [
        "layer1.1", "layer2.1"]
    # union, in named_modules() order, without duplicates
    assert pd.select(net, ["fc", "layer1.*", "layer1.0"]) == ["layer1.0", "layer1.1", "fc"]


def test_exclude(net):
    assert pd.select(net, "layer*.*", exclude="layer2.1") == ["layer1.0", "layer1.1", "layer2.0"]
    assert pd.select(net, "**.conv", exclude=[lambda n, m: n.startswith("layer2")]) == [
        "layer1.0.conv", "layer1.1.conv"]
    with pytest.raises(ValueError, match="nothing is left"):
        pd.select(net, "fc", exclude=nn.Linear)


def test_no_match_names_the_closest(net):
    with pytest.raises(ValueError) as e:
        pd.select(net, "layer3.*")
    msg = str(e.value)
    assert "'layer3.*' matched no module of Net" in msg
    assert "'layer1.0'" in msg or "'layer2.0'" in msg
    assert "Top-level modules: 'stem'" in msg
    # One element of a list that matches nothing is an error too (a typo, usually).
    with pytest.raises(ValueError, match="'layr2.0'"):
        pd.select(net, ["layer1.0", "layr2.0"])


def test_bad_selector_types(net):
    with pytest.raises(TypeError, match="selector must be"):
        pd.select(net, 3)
    with pytest.raises(TypeError, match="not an nn.Module subclass"):
        pd.select(net, int)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        pd.select("not a model", "fc")
    with pytest.raises(ValueError, match="empty list"):
        pd.select(net, [])


def test_wrappers_are_transparent(net):
    bare = pd.select(net, "layer1.*")
    dp = nn.DataParallel(net)
    assert pd.select(dp, "layer1.*") == bare
    assert pd.select(dp, "module.layer1.*") == bare  # raw names work too
    assert pd.select(dp, "") == [""]  # the bare model's root, not the wrapper
    compiled = torch.compile(net)
    assert pd.select(compiled, "layer1.*") == bare
    assert pd.select(compiled, "_orig_mod.layer1.*") == bare


def test_checkpoint_wrapper_is_transparent(net):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    net.layer1[0] = checkpoint_wrapper(net.layer1[0])
    assert pd.select(net, "layer1.*") == ["layer1.0", "layer1.1"]
    assert pd.select(net, "layer1.0.conv") == ["layer1.0.conv"]
    # The wrapped module is picked, not the wrapper.
    h = pd.attach(net, "layer1.0", pd.Dropout(0.5))
    assert isinstance(net.layer1[0]._checkpoint_wrapped_module, Block)
    assert len(net.layer1[0]._checkpoint_wrapped_module._forward_hooks) == 1
    h.remove()


def test_shared_modules_are_listed_once():
    shared = nn.Linear(4, 4)
    m = nn.Sequential(shared, nn.ReLU(), shared)
    assert pd.select(m, "*") == ["0", "1"]


def test_a_module_object_selects_that_module(net):
    assert pd.select(net, net.layer1) == ["layer1"]
    assert pd.select(net, [net.fc, "stem"]) == ["stem", "fc"]
    assert pd.select(net, "layer1.*", exclude=net.layer1[0]) == ["layer1.1"]
    with pytest.raises(pd.SelectorError, match="module object Linear"):
        pd.select(net, nn.Linear(2, 2))  # not a module of this model


def test_an_exclude_that_matches_nothing_is_an_error(net):
    with pytest.raises(pd.SelectorError, match=r"exclude: selector 'layer3\.\*'"):
        pd.select(net, "layer*.*", exclude="layer3.*")
    with pytest.raises(pd.SelectorError, match="exclude"):
        pd.select(net, "layer*.*", exclude=["layer2.1", "fcc"])


def test_params_of_excluded_modules_stay_untouched_under_a_selected_ancestor(net):
    h = pd.attach(net, ["", "layer1"], pd.ScaleGrad(0.0), where="params",
                  exclude=["fc", "layer1.0"])
    net(torch.randn(2, 3, 8, 8)).sum().backward()
    assert torch.count_nonzero(net.stem.weight.grad) == 0
    assert torch.count_nonzero(net.layer1[1].conv.weight.grad) == 0
    assert torch.count_nonzero(net.fc.weight.grad) > 0
    assert torch.count_nonzero(net.layer1[0].conv.weight.grad) > 0
    assert h.layers == ["", "layer1"]

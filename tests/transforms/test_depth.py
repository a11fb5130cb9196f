"""Per-layer settings (pd.by_depth): timm's rule, composition with a step schedule, summary,
state dicts, copies, validation, and one compiled graph."""

import copy
import pickle

import pytest
import torch
import torch.nn as nn
from timm.layers import calculate_drop_path_rates

import plugdrop as pd

from conformance import _CountingBackend


class Parallel(nn.Module):
    """Independent identity layers, all applied to the same input."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.ls = nn.ModuleList(nn.Identity() for _ in range(n))

    def forward(self, x):
        return torch.stack([layer(x) for layer in self.ls])


def test_by_depth_is_timms_rule():
    m = Parallel(12)
    h = pd.attach(m, "ls.*", pd.DropPath(pd.by_depth(0.0, 0.1)))
    got = [h.transform.values(name)["p"] for name in h.layers]
    assert got == pytest.approx(calculate_drop_path_rates(0.1, 12), abs=1e-7)
    rows = pd.summary(m)
    assert [r.values["p"] for r in rows] == pytest.approx(got)
    assert "by_depth(0, 0.1)" in str(rows)


def test_each_layer_drops_at_its_own_rate():
    torch.manual_seed(0)
    m = Parallel(3).train()
    pd.attach(m, "ls.*", pd.DropPath(pd.by_depth(0.0, 0.4)))
    n = 20000
    out = m(torch.ones(n, 2))
    for i, p in enumerate([0.0, 0.2, 0.4]):
        dropped = (out[i, :, 0] == 0).float().mean().item()
        assert abs(dropped - p) < 5 * (p * (1 - p) / n) ** 0.5 + 1e-9


def test_a_rule_callable_gets_index_count_and_name():
    seen = []

    def rule(index, count, name):
        seen.append((index, count, name))
        return 0.05 if name.endswith("1") else 0.0

    h = pd.attach(Parallel(3), "ls.*", pd.Dropout(pd.by_depth(rule)))
    assert seen == [(0, 3, "ls.0"), (1, 3, "ls.1"), (2, 3, "ls.2")] or seen[-3:] == [
        (0, 3, "ls.0"), (1, 3, "ls.1"), (2, 3, "ls.2")]
    assert [h.transform.values(n)["p"] for n in h.layers] == [0.0, 0.05, 0.0]


def test_composed_with_a_step_schedule_and_resumed_from_a_state_dict():
    def make():
        return pd.DropPath(pd.by_depth(0.0, 0.2) * pd.linear(0.0, 1.0, steps=10))

    h = pd.attach(Parallel(3), "ls.*", make())
    assert [h.transform.values(n)["p"] for n in h.layers] == [0.0, 0.0, 0.0]
    h.step(5)
    assert [h.transform.values(n)["p"] for n in h.layers] == pytest.approx([0.0, 0.05, 0.1])
    fresh = pd.attach(Parallel(3), "ls.*", make())
    fresh.load_state_dict(h.state_dict())
    assert [fresh.transform.values(n)["p"] for n in fresh.layers] == pytest.approx(
        [0.0, 0.05, 0.1])
    # the schedule may come first as well
    t = pd.DropPath(pd.linear(0.0, 1.0, steps=10) * pd.by_depth(0.0, 0.2))
    assert repr(t) == "DropPath(p=by_depth(0, 0.2) * linear(0, 1, steps=10))"


def test_copies_keep_each_layers_value():
    m = Parallel(3)
    pd.attach(m, "ls.*", pd.DropPath(pd.by_depth(0.0, 0.2))).step(2)
    for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        (h,) = pd.handles(clone)
        assert [r.values["p"] for r in pd.summary(clone)] == pytest.approx([0.0, 0.1, 0.2])
        assert h.step_count == 2


def test_bad_values_raise_up_front_or_at_attach():
    with pytest.raises(pd.SettingError, match="p"):
        pd.DropPath(pd.by_depth(0.0, 1.5))
    with pytest.raises(pd.SettingError, match="p"):
        pd.DropPath(pd.by_depth(0.0, 0.5) * 3)
    with pytest.raises(pd.SettingError, match="ls.2"):
        pd.attach(Parallel(3), "ls.*", pd.DropPath(pd.by_depth(lambda i, n, name: i * 0.6)))
    with pytest.raises(TypeError):
        pd.by_depth(0.1)
    with pytest.raises(TypeError):
        pd.linear(0, 1, steps=2) * pd.linear(0, 1, steps=2)  # no product of step schedules


@pytest.mark.parametrize("transform", [
    lambda p: pd.DropPath(p), lambda p: pd.DropBlock(p, 3), lambda p: pd.GaussianNoise(p)])
def test_compiled_model_stays_one_graph_and_follows_each_layer(transform):
    torch._dynamo.reset()
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1),
                      nn.Conv2d(4, 4, 3, padding=1)).train()
    h = pd.attach(m, "*", transform(pd.by_depth(0.0, 0.3) * pd.linear(0.0, 1.0, steps=6)))
    backend = _CountingBackend()
    cm = torch.compile(m, backend=backend, fullgraph=True)
    x = torch.ones(4, 3, 8, 8)
    ref = m.eval()(x)
    m.train()
    assert torch.equal(cm(x), ref)  # every layer at 0 at step 0
    for _ in range(6):
        h.step()
        cm(x)
    assert backend.compiles == 1
    assert not torch.equal(cm(x), ref)
    torch._dynamo.reset()


def test_gradient_transforms_take_per_layer_values():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 3), nn.Identity(), nn.Linear(3, 3), nn.Identity())
    pd.attach(m, ["1", "3"], pd.ScaleGrad(pd.by_depth(1.0, 0.0)))
    x = torch.randn(2, 3, requires_grad=True)
    m(x).sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))  # the last layer scales by 0
    assert torch.count_nonzero(m[2].weight.grad) == 0
    m.zero_grad()
    pd.detach(m)
    pd.attach(m, ["0", "2"], pd.ScaleGrad(pd.by_depth(0.0, 1.0)), where="params")
    m(x).sum().backward()
    assert torch.count_nonzero(m[0].weight.grad) == 0 and torch.count_nonzero(m[2].weight.grad)


def test_by_parent_gives_both_branches_of_a_block_its_rate_as_timm():
    timm = pytest.importorskip("timm")
    vit = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=4, num_classes=3)
    h = pd.attach(vit, ["blocks.*.drop_path1", "blocks.*.drop_path2"],
                  pd.DropPath(pd.by_depth(0.0, 0.1, by="parent")))
    rates = calculate_drop_path_rates(0.1, 4)
    for i in range(4):
        for branch in ("drop_path1", "drop_path2"):
            assert h.transform.values(f"blocks.{i}.{branch}")["p"] == pytest.approx(rates[i])
    assert "by='parent'" in repr(h.transform)
    with pytest.raises(pd.SettingError, match="by"):
        pd.by_depth(0.0, 0.1, by="block")

"""Residual branches found by running the model: checked against where timm itself puts its
DropPath modules (those that run) on seven families, torchvision's ResNet and hand-written
networks; the "residual:" selector and the warning for DropPath elsewhere."""

import warnings

import pytest
import torch
import torch.nn as nn

import plugdrop as pd

timm = pytest.importorskip("timm")
from timm.layers import DropPath as TimmDropPath  # noqa: E402

FAMILIES = [
    ("resnet10t", {}, 32),
    ("convnext_atto", {}, 32),
    ("vit_tiny_patch16_224", {"img_size": 32, "depth": 2}, 32),
    ("swin_tiny_patch4_window7_224", {"img_size": 56, "depths": (1, 1, 2, 1)}, 56),
    ("efficientnet_b0", {}, 32),
    ("mobilenetv3_small_050", {}, 32),
    ("regnetx_002", {}, 32),
]


def _timm_drop_paths_that_run(model: nn.Module, x: torch.Tensor) -> list[str]:
    """Where timm put its DropPath modules, restricted to those its forward calls."""
    h = pd.attach(model, TimmDropPath, pd.Dropout(0.0))
    model.train()(x)
    ran = [name for name, n in h.calls.items() if n]
    h.remove()
    return ran


@pytest.mark.parametrize("name,kwargs,size", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_branches_are_where_timm_puts_drop_path(name, kwargs, size):
    torch.manual_seed(0)
    model = timm.create_model(name, drop_path_rate=0.1, num_classes=3, **kwargs)
    x = torch.randn(2, 3, size, size)
    want = _timm_drop_paths_that_run(model, x)
    assert want  # the family has residual blocks
    model.train()
    found = pd.residual_branches(model, x)
    # timm's rates start at 0 and it puts no DropPath on the first block: every other branch
    # is one of timm's DropPath modules, and timm's are all found
    extra = [n for n in found if n not in want]
    assert [n for n in found if n in want] == want
    assert not extra or {n.rsplit(".", 1)[0] for n in extra} == {found[0].rsplit(".", 1)[0]}
    assert model.training and all(m.training for m in model.modules())  # modes restored
    assert not pd.summary(model)  # nothing left on the model
    try:  # without an example input: torch.fx, where the family traces
        symbolic = pd.residual_branches(model)
    except pd.AttachError as e:
        assert "failed in module" in str(e) or "could not trace" in str(e)
    else:
        assert symbolic == found


def test_torchvision_resnet_branches_end_at_bn2():
    torchvision = pytest.importorskip("torchvision")
    m = torchvision.models.resnet18(num_classes=3)
    found = pd.residual_branches(m, torch.randn(1, 3, 32, 32))
    assert found == [f"layer{i}.{j}.bn2" for i in range(1, 5) for j in range(2)]


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, project: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4)
        self.mlp = Mlp()
        self.proj = nn.Linear(4, 4) if project else None

    def forward(self, x):
        short = x if self.proj is None else self.proj(x)
        return short + self.mlp(self.norm(x))


class Net(nn.Module):
    """Hand-written: identity and projection shortcuts, a positional embedding added (not a
    residual), and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(3, 4)
        self.pos = nn.Parameter(torch.zeros(4))
        self.blocks = nn.Sequential(Block(), Block(project=True), Block())
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x) + self.pos))


def test_hand_written_network():
    m = Net()
    want = ["blocks.0.mlp", "blocks.1.mlp", "blocks.2.mlp"]
    assert pd.residual_branches(m, torch.randn(2, 3)) == want
    assert pd.residual_branches(Net()) == want  # traced by torch.fx


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = Gate()

    def forward(self, x):
        return x + self.gate(x)


class Gate(nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x  # fx cannot trace this


def test_untraceable_models_name_the_module_and_need_an_example_input():
    with pytest.raises(pd.AttachError, match=r"failed in module 'gate'.*example input"):
        pd.residual_branches(DataDependent())
    m = DataDependent()
    with pytest.raises(pd.SelectorError, match="'gate'"):
        pd.select(m, "residual:")
    assert pd.residual_branches(m, torch.randn(2, 3)) == ["gate"]  # running it works
    assert pd.select(m, "residual:") == ["gate"]


def test_the_residual_selector():
    m = Net()
    assert pd.select(m, "residual:") == ["blocks.0.mlp", "blocks.1.mlp", "blocks.2.mlp"]
    m = Net()
    pd.residual_branches(m, torch.randn(2, 3))
    assert pd.select(m, "residual:blocks.1") == ["blocks.1.mlp"]
    assert pd.select(m, ["residual:", "head"], exclude="residual:blocks.0") == [
        "blocks.1.mlp", "blocks.2.mlp", "head"]
    with pytest.raises(pd.SelectorError, match="residual:nothing"):
        pd.select(m, "residual:nothing")
    h = pd.attach(m, "residual:", pd.DropPath(pd.by_depth(0.0, 0.2)))
    assert [r.values["p"] for r in pd.summary(m)] == pytest.approx([0.0, 0.1, 0.2])
    h.remove()


def test_drop_path_off_a_residual_branch_warns_naming_the_right_ones():
    m = Net()  # not analysed: traced by torch.fx at attach
    with pytest.warns(pd.NotResidualWarning, match=r"'blocks\.1'.*'blocks\.1\.mlp'"):
        pd.attach(m, "blocks.1", pd.DropPath(0.1))
    pd.detach(m)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pd.attach(m, "blocks.*.mlp", pd.DropPath(0.1))
        pd.attach(m, "blocks.1", pd.Dropout(0.1))  # only DropPath cares


class Broken(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(5, 4)

    def forward(self, x):
        return self.b(self.a(x))


def test_a_failing_forward_names_the_module():
    with pytest.raises(pd.AttachError, match=r"module 'b' \(Linear\)"):
        pd.residual_branches(Broken(), torch.randn(2, 3))


@pytest.mark.parametrize("example", [True, False], ids=["run", "fx"])
def test_modules_whose_output_reaches_a_branch_unchanged_do_not_warn(example):
    vit = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2, num_classes=3)
    if example:
        pd.residual_branches(vit, torch.randn(1, 3, 32, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pd.attach(vit, "blocks.*.mlp", pd.DropPath(0.1))  # drop_path2 is an identity after it
    with pytest.warns(pd.NotResidualWarning, match="'blocks.0'"):
        pd.attach(vit, "blocks.*", pd.DropPath(0.1))


class _Node:
    def __init__(self, parents=()) -> None:
        self.parents = list(parents)


class _Wrapped:
    """An autograd node as torch 2.11 hands it to Python: a wrapper made at each access while
    none is alive (the same object while one is) and freed when unreferenced, so that its id
    comes back as another node's."""

    live: "weakref.WeakValueDictionary[int, _Wrapped]"

    def __init__(self, node: _Node) -> None:
        self.node = node

    @classmethod
    def of(cls, node: _Node) -> "_Wrapped":
        w = cls.live.get(id(node))
        if w is None:
            w = cls.live[id(node)] = cls(node)
        return w

    @property
    def next_functions(self):
        return tuple((_Wrapped.of(p), 0) for p in self.node.parents)


def test_the_graph_walk_survives_node_wrappers_made_afresh():
    """Before: the walk remembered the ids of the nodes it had met, not the nodes, and on torch
    2.11 found no residual branch in ViT, ConvNeXt or Swin (a freed node's id came back as the
    next node's, which was then skipped as met)."""
    import weakref

    from plugdrop._attach import _spans

    _Wrapped.live = weakref.WeakValueDictionary()
    target = _Node()
    chain = target
    for _ in range(50):
        chain = _Node([chain])
    held = _Wrapped.of(target)
    assert _spans.reaches(_Wrapped.of(chain), held)
    assert not _spans.reaches(_Wrapped.of(chain), _Wrapped.of(_Node()))

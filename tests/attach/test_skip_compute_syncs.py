"""DropPath(skip_compute=True) never waits for the device (issue 56, item 3): a training step
makes no call that reads a value of a tensor computed from the input or the model's weights
(``nonzero``, ``item``, ``tolist``, ``bool``, ``cpu``, ``numpy`` and friends), on any machine.

On a GPU each such call is a device-to-host wait. On the CPU they cost nothing, so the test
follows the data instead: every tensor computed from the input, the parameters or the
buffers (through any op, forward and backward, seen by a ``TorchDispatchMode``) is the
device's; a call that reads one on the host (seen by a ``TorchFunctionMode`` for the Python
methods, by the dispatch mode for the aten ops behind them) is recorded. The host's own draw
(the CPU generator's ``bernoulli``, its row index) is computed from nothing of the device and
may be read freely. A second test also makes the step's counts of full-batch copies the
gather and the scatter's own."""

from __future__ import annotations

import collections
import copy
from typing import Any

import pytest
import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from test_skip_compute import Forced, vit

import plugdrop as pd

#: aten ops that read a tensor's values on the host (a device-to-host wait on a GPU)
SYNC_OPS = {"nonzero", "_local_scalar_dense", "masked_select", "_unique", "_unique2",
            "unique_dim", "unique_consecutive", "repeat_interleave", "equal", "allclose",
            "is_nonzero", "nonzero_static"}
#: Python-level calls that read a tensor's values on the host
SYNC_METHODS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu,
                torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__,
                torch.Tensor.__index__, torch.Tensor.nonzero, torch.nonzero,
                torch.Tensor.masked_select, torch.masked_select, torch.Tensor.unique,
                torch.unique, torch.Tensor.equal, torch.equal, torch.Tensor.__array__}

BOOLS = (torch.bool, torch.uint8)


class DeviceData(TorchDispatchMode):
    """Marks every tensor computed from the ``roots`` (the device's data) and records the
    aten ops of :data:`SYNC_OPS` that take one."""

    def __init__(self, roots: list[torch.Tensor]) -> None:
        super().__init__()
        self.ids = {id(t) for t in roots}
        self.keep: list[Any] = list(roots)  # keeps the ids valid
        self.calls: list[str] = []

    def marked(self, value: Any) -> bool:
        return any(isinstance(t, torch.Tensor) and id(t) in self.ids
                   for t in tree_leaves(value))

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        from_device = self.marked((args, kwargs))
        name = func.overloadpacket.__name__
        if from_device and (name in SYNC_OPS or name in ("index", "index_put", "index_put_")
                            and any(isinstance(t, torch.Tensor) and t.dtype in BOOLS
                                    for t in tree_leaves(args[1:]))):
            self.calls.append(f"aten::{name}")  # a boolean mask's index: a nonzero inside
        out = func(*args, **kwargs)
        if from_device:
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.ids.add(id(t))
                    self.keep.append(t)
        return out


class HostReads(TorchFunctionMode):
    """Records the Python calls of :data:`SYNC_METHODS` on a tensor :class:`DeviceData`
    marked."""

    def __init__(self, data: DeviceData) -> None:
        super().__init__()
        self.data = data
        self.calls: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in SYNC_METHODS and self.data.marked((args, kwargs)):
            self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **kwargs)


def host_reads(model: nn.Module, x: torch.Tensor, step: Any = None) -> list[str]:
    """The reads of the device's data on the host during one training forward + backward."""
    model.train()
    x = x.clone().requires_grad_()
    roots = [x, *model.parameters(), *model.buffers()]
    data = DeviceData(roots)
    reads = HostReads(data)
    with data, reads:
        if step is None:
            model(x).square().sum().backward()
        else:
            step(model, x)
    return reads.calls + data.calls


class ConvBlock(nn.Module):
    """A ConvNeXt-like block: a depthwise conv on the stream, then a channels-last MLP and
    back, so the branch's output is laid out channels-last (the scatter's memory order)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.mlp = nn.Sequential(nn.LayerNorm(c), nn.Linear(c, 2 * c), nn.GELU(),
                                 nn.Linear(2 * c, c))
        self.out = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.out(self.mlp(self.dw(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2))


def models() -> dict[str, tuple[nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    convs = nn.Sequential(ConvBlock(8), ConvBlock(8))
    return {"vit": (vit(), torch.randn(16, 3, 32, 32)),
            "conv": (convs, torch.randn(16, 8, 6, 6))}


@pytest.mark.parametrize("name", ["vit", "conv"])
def test_a_skip_compute_step_reads_nothing_of_the_device(name):
    model, x = models()[name]
    pd.residual_branches(model, x[:2])
    handle = pd.attach(model, "residual:", pd.DropPath(0.5, skip_compute=True, pad=4))
    assert handle.layers
    seen: list[int] = []
    first = handle.layers[0]
    model.get_submodule(first).register_forward_pre_hook(lambda m, a: seen.append(a[0].shape[0]))
    torch.manual_seed(0)
    for _ in range(2):  # several draws: a gather, padding...
        assert host_reads(model, x) == []
    assert any(0 < s < x.shape[0] for s in seen)  # the branches did run on fewer rows
    # where skipping cannot pay (p * batch under min_dropped): the plain mask, no read either
    plain_rule = copy.deepcopy(model)
    pd.detach(plain_rule)
    pd.attach(plain_rule, "residual:", pd.DropPath(0.5, skip_compute=True, min_dropped=100))
    assert host_reads(plain_rule, x) == []


def test_the_recorder_sees_each_kind_of_read():
    """The recorder is not blind: each host read of a tensor computed from the input is
    recorded, while the same reads of a host tensor computed from nothing of the device are
    not."""
    lin = nn.Linear(4, 4)

    def reading(how):
        def step(model, x):
            y = model(x)
            how(y)
            free = torch.ones(3)
            free.nonzero(), free.tolist(), free.sum().item(), bool(free[0])
            y.sum().backward()
        return step

    for how, want in [(lambda y: y.nonzero(), "nonzero"), (lambda y: y.sum().item(), "item"),
                      (lambda y: y.tolist(), "tolist"), (lambda y: bool(y[0, 0] > 0),
                                                           "__bool__"),
                      (lambda y: y.detach().cpu(), "cpu"),
                      (lambda y: y.detach().numpy(), "numpy"),
                      (lambda y: y[y > 0], "aten::index"),
                      (lambda y: torch.nonzero(y), "aten::nonzero")]:
        calls = host_reads(lin, torch.randn(2, 4), reading(how))
        assert any(want in c for c in calls), (want, calls)
    assert host_reads(lin, torch.randn(2, 4), reading(lambda y: None)) == []


class CountOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def test_the_gather_and_the_scatter_copy_the_batch_once_each(monkeypatch):
    """Per skipped branch and step: one gather and one scatter forward, one of each backward,
    a zero-fill for the dropped rows each way; no clone, no copy of the padded rows (before:
    torch's index_select backward cloned its zeros, and the padding's slice was copied back
    into zeros, two device-to-device copies per branch)."""
    model, x = models()["conv"]
    pd.residual_branches(model, x[:2])
    pd.attach(model, "residual:", pd.DropPath(0.5, skip_compute=True, pad=4))
    bare_ops = CountOps()
    bare = copy.deepcopy(model)
    pd.detach(bare)
    with bare_ops:
        bare(x.clone().requires_grad_()).sum().backward()
    model.train()
    ops = CountOps()
    mask = [1] * 5 + [0] * 11  # 5 kept of 16, padded to 8 rows: both branches skip
    with monkeypatch.context() as mp, ops:
        mp.setattr(torch, "bernoulli", Forced([mask]))
        model(x.clone().requires_grad_()).sum().backward()
    extra = ops.ops - bare_ops.ops
    branches = 2
    assert extra["clone"] == extra["copy_"] == extra["slice_backward"] == 0, extra
    assert extra["index_select"] == 2 * branches  # the gather, the scatter's backward
    assert extra["index_add_"] + extra["index_copy_"] == 2 * branches
    assert extra["new_zeros"] == 2 * branches  # the dropped rows' zeros, each way

"""Attachments and Accelerate: attach_all before ``accelerator.prepare``, bind the prepared
optimizer, and training is the plain loop's, step for step; the group is saved and restored by
``accelerator.save_state`` / ``load_state`` like any stateful object."""

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from conftest import Net

#: every test trains through the framework's own loop
pytestmark = pytest.mark.slow

accelerate = pytest.importorskip("accelerate")

SPEC = """\
- {layers: "layer1.*.conv", transform: DropBlock, block_size: 3,
   p: {schedule: linear, start: 0.0, end: 0.2}}
- {layers: "", transform: ClipGradNorm, max_norm: 0.5, where: params}
"""


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.randn(16, 3, 8, 8, generator=g),
                                          torch.randint(0, 5, (16,), generator=g))


def _plain(accum):
    torch.manual_seed(0)
    model = Net()
    group = pd.attach_all(model, SPEC, steps=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    group.bind(opt)
    torch.manual_seed(1)
    for i, (x, y) in enumerate(torch.utils.data.DataLoader(_data(), batch_size=2)):
        (nn.functional.cross_entropy(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
    return model, group


def _accelerated(accum):
    torch.manual_seed(0)
    model = Net()
    group = pd.attach_all(model, SPEC, steps=10)
    acc = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=accum)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pmodel, popt, loader = acc.prepare(model, opt,
                                       torch.utils.data.DataLoader(_data(), batch_size=2))
    group.bind(popt)  # the AcceleratedOptimizer: bound through to the torch optimizer
    torch.manual_seed(1)
    for x, y in loader:
        with acc.accumulate(pmodel):
            acc.backward(nn.functional.cross_entropy(pmodel(x), y))
            popt.step()
            popt.zero_grad()
    return model, group, acc


@pytest.mark.parametrize("accum", [1, 2])
def test_attachments_survive_prepare_and_train_as_the_plain_loop(accum):
    plain, pgroup = _plain(accum)
    model, group, _ = _accelerated(accum)
    assert group.step_count == pgroup.step_count == 8 // accum
    assert group.calls == pgroup.calls and group.values() == pgroup.values()
    for a, b in zip(plain.parameters(), model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert len(pd.summary(model)) == 3


def test_accelerate_saves_and_restores_the_group(tmp_path):
    _, group, acc = _accelerated(1)
    acc.register_for_checkpointing(group)
    acc.save_state(str(tmp_path / "state"))
    fresh = pd.attach_all(Net(), SPEC, steps=10)
    acc2 = accelerate.Accelerator(cpu=True)
    acc2.register_for_checkpointing(fresh)
    acc2.load_state(str(tmp_path / "state"))
    assert fresh.step_count == 8 and fresh.values() == group.values()

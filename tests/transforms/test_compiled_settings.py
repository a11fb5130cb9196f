"""A setting's tensor first asked for while ``torch.compile`` traces (a transform called
directly inside compiled code, a model moved to another device after ``attach``, DropBlock's
``p`` on the host for the Triton kernels): made inside the traced code, on every supported
torch (torch 2.11's dynamo could not trace the context that makes such tensors elsewhere)."""

from __future__ import annotations

import torch

import plugdrop as pd
from plugdrop import _compat


def test_a_settings_tensor_first_made_while_tracing_follows_the_schedule():
    torch._dynamo.reset()
    t = pd.Dropout(pd.linear(0.0, 0.9, steps=1))  # p: 0, then 0.9 (never attached: no tensor)
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    f = torch.compile(lambda x: t(x), backend=backend, fullgraph=True)
    x = torch.ones(64, 64)
    assert torch.equal(f(x), x)  # p = 0
    t._set_step(1)
    y = f(x)
    assert 0.8 < (y == 0).float().mean().item() < 0.97  # p = 0.9: the new value, read
    t._set_step(0)
    assert torch.equal(f(x), x)
    assert len(graphs) <= 2  # the first trace made the tensor, the next takes it as input
    torch._dynamo.reset()


def test_constants_enter_nothing_while_compiling():
    seen = []

    def f(x):
        with _compat.constants():
            seen.append(torch.is_grad_enabled())  # traced: grad mode as the caller's
            return x + 1

    torch._dynamo.reset()
    with torch.enable_grad():
        torch.compile(f, backend="eager", fullgraph=True)(torch.ones(2))
    with torch.enable_grad():
        f(torch.ones(2))  # eager: without autograd
    assert seen == [True, False]
    torch._dynamo.reset()

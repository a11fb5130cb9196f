"""DropPath(skip_compute=True) where it is refused (one line naming the module and its class,
at attach), under torch.compile, and under DistributedDataParallel."""

from __future__ import annotations

import copy
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from _processes import spawn

import plugdrop as pd


class Mlp(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim: int, norm: type = nn.LayerNorm) -> None:
        super().__init__()
        self.norm, self.mlp = norm(dim), Mlp(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class Net(nn.Module):
    def __init__(self, dim: int = 8, blocks: int = 2, norm: type = nn.LayerNorm) -> None:
        super().__init__()
        self.embed = nn.Linear(3, dim)
        self.blocks = nn.Sequential(*[Block(dim, norm) for _ in range(blocks)])
        self.head = nn.Linear(dim, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(x)))


def refused(model: nn.Module, match: str, example: torch.Tensor | None = None,
            selector: str = "residual:", **kwargs: object) -> str:
    """The one-line AttachError of attaching skip_compute, which leaves nothing attached."""
    if example is not None:
        pd.residual_branches(model, example)
    before = list(pd.summary(model))
    with pytest.raises(pd.AttachError, match=match) as e:
        pd.attach(model, selector, pd.DropPath(0.2, skip_compute=True), **kwargs)
    assert "\n" not in str(e.value) and list(pd.summary(model)) == before
    return str(e.value)


@pytest.mark.parametrize("example", [True, False], ids=["run", "fx"])
def test_batch_norm_in_a_branch_is_refused(example):
    model = Net(norm=nn.BatchNorm1d)
    refused(model, r"branch 'blocks\.0\.mlp' \(Mlp\).*'blocks\.0\.norm' \(BatchNorm1d\), which "
                   r"normalizes with the statistics of its batch", torch.randn(4, 3) if example
            else None)


@pytest.mark.slow
def test_timm_resnet_is_refused_for_its_batch_norms():
    timm = pytest.importorskip("timm")
    model = timm.create_model("resnet10t", num_classes=3)
    refused(model, r"'layer1\.0\.bn2' \(BatchNorm2d\).*'layer1\.0\.bn1' \(BatchNorm2d\)",
            torch.randn(2, 3, 32, 32))


class Attention(nn.Module):
    """Single-head attention with a key mask ``(B, N)``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = (q @ k.transpose(1, 2)).masked_fill(key_mask[:, None, :], float("-inf"))
        return self.proj(scores.softmax(-1) @ v)


class Masked(nn.Module):
    """A branch that takes an attention mask beside the stream."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm, self.attn = nn.LayerNorm(dim), Attention(dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x + self.attn(self.norm(x), key_mask=mask)


class MaskedNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Masked(8)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.block(x, mask)


def test_a_branch_taking_more_than_the_stream_is_refused():
    x, mask = torch.randn(3, 5, 8), torch.zeros(3, 5, dtype=torch.bool)
    message = refused(MaskedNet(), r"branch 'block\.attn' \(Attention\).*module "
                                   r"'block\.attn' \(Attention\) takes argument "
                                   r"'key_mask', a tensor of the batch's size",
                      (x, mask))
    assert "an attention mask" in message
    # without an example input (torch.fx), the mask is a required input of the model
    refused(MaskedNet(), r"'block\.attn'.*takes 'mask', a value not computed from the "
                         r"branch's input")


class Shared(nn.Module):
    """One norm for two branches."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm, self.f, self.g = nn.LayerNorm(dim), Mlp(dim), Mlp(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.f(self.norm(x))
        return x + self.g(self.norm(x))


def test_an_entry_called_twice_per_forward_is_refused():
    refused(nn.Sequential(Shared(8)), r"branch '0\.f' \(Mlp\).*its entry '0\.norm' "
                                      r"\(LayerNorm\) runs 2 times per forward",
            torch.randn(2, 8))


class ReadsBatch(nn.Module):
    """A branch reshaped with the stream's batch size: fails on fewer samples."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm, self.mlp, self.out = nn.LayerNorm(dim), Mlp(dim), nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        return x + self.out(self.mlp(self.norm(x)).reshape(b, n * c).reshape(b, n, c))


def test_a_branch_reading_the_streams_batch_size_is_refused_when_traced():
    refused(nn.Sequential(ReadsBatch(8)), r"the branch reads the batch size of the stream")


def test_other_refusals():
    refused(Net(), r"branch 'blocks\.0' \(Block\).*not a residual branch plugdrop found \("
                   r"the residual branches are e\.g\. 'blocks\.0\.mlp'",
            torch.randn(2, 3), selector="blocks.0")
    refused(Net(), "leave where='output'", selector="blocks.0.mlp", where="input")
    model = Net()
    pd.residual_branches(model, torch.randn(2, 3))
    pd.attach(model, "blocks.0.mlp", pd.DropPath(0.1, skip_compute=True))
    with pytest.raises(pd.AttachError, match=r"'blocks\.0\.norm' \(LayerNorm\) already starts "
                                             r"another skip-compute branch"):
        pd.attach(model, "residual:", pd.DropPath(0.2, skip_compute=True))
    model = Net()
    pd.attach(model, "blocks.1.mlp.fc1", pd.ManifoldMixup(1.0))
    refused(model, r"'blocks\.1\.mlp\.fc1' \(Linear\), which ManifoldMixup is attached there "
                   r"and mixes samples", torch.randn(2, 3))
    refused(nn.Sequential(SeqFirst(8)), r"branch '0\.out' \(Identity\).*'0\.attn' "
                                        r"\(MultiheadAttention\), which has batch_first=False",
            torch.randn(5, 2, 8))


class SeqFirst(nn.Module):
    """Attention over dim 0 (``batch_first=False``): dim 0 is not the batch."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm, self.attn = nn.LayerNorm(dim), nn.MultiheadAttention(dim, 2)
        self.out = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return x + self.out(self.attn(h, h, h, need_weights=False)[0])


# ------------------------------------------------------------------------------ compile


def _frames() -> int:
    from torch._dynamo.utils import counters

    return counters["frames"].get("total", 0)


@pytest.mark.slow
def test_compile_marks_the_branches_batch_dynamic_and_follows_eager(monkeypatch):
    torch._dynamo.reset()
    model = Net(dim=8, blocks=1)
    pd.residual_branches(model, torch.randn(2, 3))
    pd.attach(model, "residual:", pd.DropPath(0.5, skip_compute=True))
    eager = copy.deepcopy(model).train()
    compiled = torch.compile(model.train(), backend="eager")
    x = torch.randn(4, 3)
    # kept counts 2, 1, 0, 4: each graph of the branch is compiled for at most the first
    # count, 1, 0 (specialized by dynamo) and a symbolic size; then no recompilation
    masks = [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1],
             [1, 1, 0, 1], [0, 0, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]]
    for step, mask in enumerate(masks):
        if step == 4:
            frames = _frames()
        outs = []
        for m in (compiled, eager):
            with monkeypatch.context() as mp:
                mp.setattr(torch, "bernoulli", lambda ones, p: torch.tensor(
                    mask, dtype=ones.dtype).view(ones.shape))
                outs.append(m(x))
            outs[-1].square().sum().backward()
        torch.testing.assert_close(outs[0], outs[1])
    assert _frames() == frames
    for a, b in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(a.grad, b.grad)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="skip_compute=False"):  # dynamo names the reason
        torch.compile(model, backend="aot_eager", fullgraph=True)(x)
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------- DDP


def test_ddp_with_draws_that_keep_no_sample():
    """DDP's reducer needs a gradient for every parameter at every step (without
    find_unused_parameters): a branch that keeps no sample still gives its parameters
    gradients, of zeros, through the autograd graph."""
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(tmp, 'init')}",
                                rank=0, world_size=1)
        try:
            torch.manual_seed(0)
            model = Net(dim=8, blocks=2)
            pd.residual_branches(model, torch.randn(2, 3))
            h = pd.attach(model, "residual:", pd.DropPath(0.7, skip_compute=True))
            ddp = nn.parallel.DistributedDataParallel(model)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
            h.bind(opt)
            seen = [0]
            model.blocks[0].mlp.register_forward_pre_hook(lambda m, a: seen.append(len(a[0])))
            for _ in range(8):  # batch 2 at p = 0.7: about half the draws keep nothing
                opt.zero_grad()
                ddp(torch.randn(2, 3)).square().mean().backward()
                opt.step()
                assert all(p.grad is not None for p in model.parameters())
            assert 0 in seen[1:] and h.step_count == 8
        finally:
            dist.destroy_process_group()


#: per rank, the keep masks of the two branches (rank 1's first branch keeps no sample)
_RANK_MASKS = [[[1, 0, 0, 1], [1, 1, 0, 1]], [[0, 0, 0, 0], [1, 1, 1, 1]]]


def _ddp_worker(rank: int, world: int, init: str, out: str) -> None:
    """One step of DDP with skip_compute under forced masks, and the same step of plain
    DropPath without DDP, its gradients averaged by hand; then steps at random draws."""
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = Net(dim=8, blocks=2)
    pd.residual_branches(model, torch.randn(2, 3))
    plain = copy.deepcopy(model)
    pd.attach(plain, "residual:", pd.DropPath(0.5))
    h = pd.attach(model, "residual:", pd.DropPath(0.5, skip_compute=True))
    ddp = nn.parallel.DistributedDataParallel(model)
    masks = iter(_RANK_MASKS[rank] * 2)
    real = torch.bernoulli
    torch.bernoulli = lambda ones, p: torch.tensor(next(masks), dtype=ones.dtype).view(
        ones.shape)
    try:
        torch.manual_seed(100 + rank)
        x = torch.randn(4, 3)
        ddp.train()(x).square().mean().backward()
        plain.train()(x).square().mean().backward()
    finally:
        torch.bernoulli = real
    error = 0.0
    for a, b in zip(model.parameters(), plain.parameters()):
        dist.all_reduce(b.grad)
        error = max(error, (a.grad - b.grad / world).abs().max().item())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    h.bind(opt)
    for _ in range(4):
        opt.zero_grad()
        ddp(torch.randn(2, 3)).square().mean().backward()
        opt.step()
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(params) for _ in range(world)]
    dist.all_gather(gathered, params)
    torch.save({"error": error, "same": all(torch.equal(gathered[0], g) for g in gathered),
                "steps": h.step_count}, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_two_processes_average_plain_drop_paths_gradients():
    """Two gloo processes drawing different kept counts (one branch keeping no sample on
    rank 1): DDP's averaged gradients are those of plain DropPath for the same masks, and the
    replicas stay equal."""
    with tempfile.TemporaryDirectory() as tmp:
        init, out = os.path.join(tmp, "init"), os.path.join(tmp, "out")
        spawn(_ddp_worker, (2, init, out))
        results = [torch.load(f"{out}.{r}") for r in range(2)]
    for r in results:
        assert r["error"] < 1e-6 and r["same"] and r["steps"] == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_without_a_host_device_synchronization():
    """The kept samples are drawn on the host and their indices copied from pinned memory:
    a training step never waits for the device (torch's sync debug mode raises if it did)."""
    torch.manual_seed(0)
    model = Net(dim=16, blocks=2)
    pd.residual_branches(model, torch.randn(2, 3))
    pd.attach(model, "residual:", pd.DropPath(0.5, skip_compute=True))
    ref = copy.deepcopy(model).cuda().train()
    model.cuda().train()
    x = torch.randn(32, 3, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            model(x).square().sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    # the same seed, the same host draws: the same result in a copy
    torch.manual_seed(1)
    a = model(x)
    torch.manual_seed(1)
    torch.testing.assert_close(a, ref(x))

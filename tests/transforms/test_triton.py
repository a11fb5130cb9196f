"""The Triton kernels (``plugdrop/_kernels/gpu``): DropBlock's and Dropout2d's seeds are the C
kernel's generator, so for one key the mask is the same on every device; the kernels keep the
transforms' contracts (the conformance suite), their statistics (``test_dropblock.py`` runs
each of its tests on them too), ``torch.compile``'s one graph, and save no float mask.

On a machine without a GPU every test here runs on CPU tensors through Triton's interpreter
(``TRITON_INTERPRET=1``, set by ``tests/conftest.py``), which executes the kernels' code
exactly: what passes here is the code that runs on a GPU. Marker: ``triton``."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

import plugdrop as pd
from plugdrop import functional as F
from plugdrop._kernels import autograd as KA
from plugdrop._kernels import cext, geometry
from plugdrop._kernels import ops as kernel_ops
from conformance import LAYOUT_SHAPES, ForwardConformance
from conftest import memory_layouts, sigma_tol, triton_path

pytestmark = pytest.mark.triton


@pytest.fixture
def device(monkeypatch) -> str:
    return triton_path(monkeypatch)


def _gb():
    from plugdrop._kernels.gpu import blockdrop

    return blockdrop


def _seeds():
    from plugdrop._kernels.gpu import seeds

    return seeds


def _positions(bits: torch.Tensor) -> torch.Tensor:
    """The positions of the set bits of int32 words."""
    words = bits.cpu().to(torch.int64) & 0xFFFFFFFF
    n = torch.arange(words.numel() * 32)
    return ((words[n // 32] >> (n % 32)) & 1).nonzero().flatten()


def _thresholds(gamma: float, device: str) -> tuple[tuple[int, ...], torch.Tensor]:
    th = cext.thresholds(gamma)
    return th, _seeds().thresholds_on(th, torch.device(device))


# ------------------------------------------------------------------------ the generator

@pytest.mark.parametrize("gamma,total", [(0.001, 3000), (0.04, 1), (0.04, 255), (0.04, 256),
                                         (0.04, 257), (0.04, 3000), (0.3, 600), (0.95, 300)])
def test_seeds_are_the_c_kernels_generator(device, gamma, total):
    th, on = _thresholds(gamma, device)
    for key in [(1, 2), (2**32 - 1, 2**31 + 5)]:
        bits = _seeds().seed_bits(on, key, total)
        assert torch.equal(_positions(bits), cext.hashed_seeds(key, th, total))


def test_counters_past_32_bits_are_the_generators(device):
    # The counter 256 j + k carries into its high word from block j = 2**24 on (seed grids
    # of more than 2**32 positions); four blocks around it, drawn without such a grid.
    th, on = _thresholds(0.05, device)
    first = (1 << 24) - 2
    total = (first + 4) * 256
    bits = _seeds().seed_bits(on, (7, 9), total, first_block=first)
    ref = cext.hashed_seeds((7, 9), th, total, first_block=first) - first * 256
    assert ref.numel() > 10 and torch.equal(_positions(bits), ref)


def test_plugdrop_no_triton_turns_the_kernels_off(monkeypatch):
    from plugdrop._kernels import gpu

    monkeypatch.setenv("PLUGDROP_NO_TRITON", "1")
    gpu.triton_module.cache_clear()
    try:
        assert not gpu.available() and not gpu.serves(torch.device("cuda"))
        # DropBlock on the torch-op paths: the same law, no Triton
        y = F.drop_block(torch.ones(64, 8, 14, 14), 0.1, 5)
        assert 0.05 < (y == 0).float().mean().item() < 0.15
    finally:
        monkeypatch.delenv("PLUGDROP_NO_TRITON")
        gpu.triton_module.cache_clear()


def test_the_first_use_on_a_device_tries_each_kernel(device):
    from plugdrop._kernels import gpu

    gpu._probe(torch.device(device))  # what runs once per GPU: passes where the kernels do


def test_kernels_that_fail_on_a_gpu_warn_once_and_leave_it_to_the_torch_ops(monkeypatch):
    import warnings

    from plugdrop._kernels import gpu

    def broken(device):
        raise RuntimeError("sm_52 is not supported\n(the rest of a long error)")

    monkeypatch.setattr(gpu, "_probe", broken)
    monkeypatch.setattr(gpu, "_WORKS", {})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    with pytest.warns(RuntimeWarning, match=r"cannot run on this GPU \(RuntimeError: sm_52 "
                                            r"is not supported\); DropBlock.*torch-op"):
        assert not gpu.works_on(7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per device
        assert not gpu.works_on(7)
        assert not gpu.serves(torch.device("cuda", 7))


def test_no_seeds_at_rate_zero(device):
    x = torch.randn(2, 3, 8, 8, device=device)
    out = _gb().block_drop(x, None, (1, 2), cext.thresholds(0.0), 3, (6, 6), (3, 3))
    assert torch.equal(out, x)


# ------------------------------------------------------------------ the mask, exactly

#: shape, block, shared: 1-D, 2-D and 3-D maps, a block as large as the map (Dropout2d's), maps
#: 63 and 64 wide (the row kernels' widest) and 70 wide with a block of 40 (the per-element
#: kernel, a seed row's reach over more than 32 bits)
CASES = [((2, 3, 12, 12), (3, 3), False), ((2, 3, 12, 12), (5, 5), True),
         ((2, 4, 9, 7), (3, 2), False), ((3, 2, 40), (7,), False),
         ((2, 2, 5, 6, 7), (2, 3, 2), False), ((2, 3, 5, 6, 7), (2, 3, 2), True),
         ((2, 3, 7, 7), (7, 7), False), ((1, 2, 50, 50), (7, 7), False),
         ((2, 3, 3, 63), (3, 5), False), ((2, 3, 3, 64), (2, 64), True),
         ((2, 2, 4, 70), (1, 40), False)]


def _reference(x, scale, key, th, channels, valid, blocks):
    """The generator's definition in torch ops (no C compiler needed): ``x * scale`` with the
    blocks of :func:`cext.hashed_seeds` zeroed."""
    seeds = cext.hashed_seeds(key, th, x.shape[0] * channels * int(torch.tensor(valid).prod()))
    return KA.sparse_block_drop(x.contiguous(), scale.to(x.dtype), seeds, channels, valid,
                                blocks)


@pytest.mark.parametrize("shape,blocks,shared", CASES)
def test_mask_is_the_generators_in_every_layout(device, shape, blocks, shared, p=0.2):
    sizes = shape[2:]
    q = geometry.solve_keep(p, sizes, blocks)
    scale = geometry.scale_map(q, sizes, blocks, torch.device("cpu"), torch.float32)
    th = cext.thresholds(1 - q)
    channels = 1 if shared else shape[1]
    valid = tuple(s - b + 1 for s, b in zip(sizes, blocks))
    x0 = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    key = (0x9E3779B9, 12345)
    for dtype in (torch.float32, torch.float64):
        want = _reference(x0.to(dtype), scale, key, th, channels, valid, blocks)
        if cext.library() is not None:  # the C kernel itself, where it is built
            assert torch.equal(cext.blockdrop(x0.to(dtype), scale, key, th, blocks, shared),
                               want)
        layouts = memory_layouts(x0.to(dtype).to(device))
        if dtype == torch.float64 or shape != CASES[0][0]:
            # the kernel's own two layouts (the others are copied first: every layout once)
            layouts = {k: v for k, v in layouts.items() if k in ("contiguous", "channels_last")}
        for name, x in layouts.items():
            got = _gb().block_drop(x, scale.to(device), key, th, channels, valid, blocks)
            assert torch.equal(got.cpu(), want), name
            if name in ("contiguous", "channels_last"):  # the kernel's own layouts: kept
                assert got.stride() == x.stride()


@pytest.mark.parametrize("shape,blocks,shared", [CASES[0], CASES[2], CASES[5], CASES[6]])
def test_the_per_element_kernel_draws_the_row_kernels_mask(device, monkeypatch, shape, blocks,
                                                           shared):
    # Maps up to 64 wide take the row kernels, wider ones the per-element kernel: the same mask.
    sizes = shape[2:]
    scale = torch.rand(sizes, device=device) + 1
    th = cext.thresholds(0.1)
    channels = 1 if shared else shape[1]
    valid = tuple(s - b + 1 for s, b in zip(sizes, blocks))
    x = torch.randn(shape, device=device)
    outs = []
    for per_element in (False, True):
        monkeypatch.setattr(_gb(), "PER_ELEMENT", per_element)
        for fmt in ("contiguous", "channels_last"):
            xx = memory_layouts(x).get(fmt, x)
            outs.append(_gb().block_drop(xx, scale, (8, 9), th, channels, valid, blocks))
    assert all(torch.equal(o, outs[0]) for o in outs[1:])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_is_the_float32_mask_rounded(device, dtype):
    shape, blocks = (4, 5, 14, 14), (7, 7)
    q = geometry.solve_keep(0.2, shape[2:], blocks)
    scale = geometry.scale_map(q, shape[2:], blocks, torch.device(device), torch.float32)
    th = cext.thresholds(1 - q)
    x = torch.randn(shape, device=device).to(dtype)
    for fmt in (torch.contiguous_format, torch.channels_last):
        xh = x.contiguous(memory_format=fmt)
        got = _gb().block_drop(xh, scale, (3, 4), th, 5, (8, 8), blocks)
        ref = _gb().block_drop(xh.float(), scale, (3, 4), th, 5, (8, 8), blocks)
        assert got.dtype == dtype and torch.equal(got, ref.to(dtype))


def test_through_the_functions_the_same_mask_as_the_c_kernel(device, monkeypatch):
    if device != "cpu" or cext.library() is None:
        pytest.skip("compares the interpreted kernel with the C kernel on the CPU")
    from plugdrop._kernels import gpu

    for fn in (lambda t: F.drop_block(t, 0.2, 5), lambda t: F.drop_block(t, 0.2, 3, shared_channels=True),
               lambda t: F.dropout2d(t, 0.3)):
        x = torch.randn(16, 64, 8, 8, requires_grad=True)
        w = torch.randn_like(x)
        runs = []
        for on in (True, False):
            monkeypatch.setattr(gpu, "ON_CPU", on)
            torch.manual_seed(4)
            y = fn(x)
            runs.append((y, torch.autograd.grad(y, x, w)[0]))
        (y1, g1), (y2, g2) = runs
        assert torch.equal(y1, y2) and torch.equal(g1, g2)


# ------------------------------------------------- the key on the device (CUDA graphs)

def test_a_device_key_is_read_at_each_launch(device):
    # A captured launch's arguments are fixed; a replay rewrites only memory (the key that
    # torch's generator draws there). The kernels read a key on the device from memory: one
    # prepared launch, its host state unchanged, draws a new mask once the key is advanced in
    # place by a device op, and each mask is the one of its words passed on the host.
    x = torch.randn(2, 4, 10, 10, device=device)
    call = _gb().prepare(x, torch.ones(10, 10, device=device), cext.thresholds(0.1), 4,
                         (8, 8), (3, 3))
    key = torch.tensor([11, 2**32 - 22], dtype=torch.int64, device=device)
    masks = []
    for _ in range(2):
        out = call(x, key)
        assert torch.equal(out, call(x, *key.tolist()))
        masks.append(out == 0)
        key.random_(0, 2**32)  # the device's generator advances the key in place
    assert all(m.any() for m in masks)
    assert not torch.equal(masks[0], masks[1])


def test_a_device_key_is_read_by_the_noise_kernel(device):
    from plugdrop._kernels.gpu import noise

    x = torch.zeros(4, 3, 10, 10, device=device)
    key = torch.tensor([5, 2**32 - 7], dtype=torch.int64, device=device)
    first = noise.noise(x, (key,), 1.0, False)
    assert torch.equal(first, noise.noise(x, tuple(key.tolist()), 1.0, False))
    key.random_(0, 2**32)
    second = noise.noise(x, (key,), 1.0, False)
    assert torch.equal(second, noise.noise(x, tuple(key.tolist()), 1.0, False))
    assert not torch.equal(first, second)


def _philox_normals(k0: int, k1: int, n: int) -> torch.Tensor:
    """The noise kernel's ``z`` for key words ``k0, k1``, written from the definitions (numpy,
    float32): Philox4x32-10 at counter ``q`` (key: ``k0`` and the low 31 bits of ``k1``),
    its four words as uniforms, two Box-Muller pairs; element ``i`` takes normal ``i % 4``
    of counter ``i // 4``."""
    import numpy as np

    m32 = np.uint64(0xFFFFFFFF)
    draws = (n + 3) // 4
    c = [np.arange(draws, dtype=np.uint64), np.zeros(draws, np.uint64),
         np.zeros(draws, np.uint64), np.zeros(draws, np.uint64)]
    key = [np.uint64(k0 & 0xFFFFFFFF), np.uint64(k1 & 0x7FFFFFFF)]
    a, b = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    for _ in range(10):
        pa, pb = a * c[0], b * c[2]
        c = [(pb >> np.uint64(32)) ^ c[1] ^ key[0], pb & m32,
             (pa >> np.uint64(32)) ^ c[3] ^ key[1], pa & m32]
        key = [(key[0] + np.uint64(0x9E3779B9)) & m32, (key[1] + np.uint64(0xBB67AE85)) & m32]
    u = []
    for w in c:
        s = w.astype(np.uint32).view(np.int32)
        s = np.where(s < 0, ~s, s)
        u.append(s.astype(np.float32) * np.float32(4.6566127342e-10))
    z = []
    for u1, u2 in ((u[0], u[1]), (u[2], u[3])):
        r = np.sqrt(np.float32(-2.0) * np.log(np.maximum(np.float32(1e-7), u1)))
        th = np.float32(6.283185307179586) * u2
        z += [r * np.cos(th), r * np.sin(th)]
    return torch.from_numpy(np.stack(z, axis=1).reshape(-1)[:n].astype(np.float32))


def test_the_noise_is_philox_four_normals_per_draw_for_any_tile(device, monkeypatch):
    """Four normals per Philox draw (as torch's randn uses them), element ``i`` normal ``i % 4``
    of counter ``i // 4``: equal to the definitions, and the same numbers whatever the tile
    of a program (a GPU's 1,024 elements, the interpreter's 65,536; 13 elements past a whole
    tile)."""
    from plugdrop._kernels.gpu import noise

    n = 4 * 300 + 13
    x = torch.zeros(n, device=device)
    z = noise.noise(x, (123456789, 2**32 - 5), 1.0, False)
    want = _philox_normals(123456789, 2**32 - 5, n)
    assert torch.allclose(z.cpu(), want, rtol=1e-5, atol=1e-5), (z.cpu() - want).abs().max()
    if device == "cpu":  # the interpreter's tile, made small: many programs
        monkeypatch.setattr(noise, "_BLOCK_INTERPRETED", 16)
        assert torch.equal(noise.noise(x, (123456789, 2**32 - 5), 1.0, False), z)


_KEYED = {"drop_block": lambda t: F.drop_block(t, 0.2, 3),
          "noise": lambda t: F.gaussian_noise(t, 0.5, multiplicative=True)}


@pytest.mark.parametrize("name", list(_KEYED))
def test_keys_drawn_on_the_device_keep_the_seeds_masks(device, monkeypatch, name):
    # The kernels with every key drawn on the device by torch's generator (what a CUDA graph's
    # capture does; Dropout2d's fused path is DropBlock's plan): torch.manual_seed reproduces
    # a run of calls, forward and backward, and successive calls draw new masks. On the CPU
    # the draw is the one of the eager key: the same masks as eager mode.
    from plugdrop._kernels import gpu

    fn = _KEYED[name]
    x = torch.randn(4, 8, 8, 8, device=device, requires_grad=True)
    w = torch.randn_like(x)
    runs = []
    for on in (True, False) if device == "cpu" else (True, True):
        monkeypatch.setattr(gpu, "DEVICE_KEY", on)
        torch.manual_seed(4)
        ys = [fn(x) for _ in range(2)]
        runs.append([(y.detach(), torch.autograd.grad(y, x, w)[0]) for y in ys])
    (a1, a2), (b1, b2) = runs
    for u, v in ((a1, b1), (a2, b2)):
        assert torch.equal(u[0], v[0]) and torch.equal(u[1], v[1])
    assert not torch.equal(a1[0], a2[0])


def test_the_key_is_drawn_on_the_device_only_while_a_graph_captures(monkeypatch):
    from plugdrop._kernels import gpu

    x = torch.ones(2, 3, 4, 4)
    assert gpu.draw_key(x).device.type == "cpu" and not gpu.DEVICE_KEY
    torch.manual_seed(1)
    host = gpu.draw_key(x)
    torch.manual_seed(1)
    assert torch.equal(host, cext.draw_key())  # eager: the C kernel's key, unchanged
    assert gpu.key_words(host) == tuple(host.tolist())
    monkeypatch.setattr(gpu, "DEVICE_KEY", True)
    assert gpu.key_words(host)[0] is host


# ------------------------------------------------------------------- the transforms' law

@pytest.mark.parametrize("p,size,block", [(0.1, 14, 7), (0.3, 8, 3), (0.05, 28, 5),
                                          (0.2, 7, 7)])
def test_dropped_fraction_is_p_and_each_kept_value_is_unbiased(device, p, size, block):
    n = 400
    x = torch.ones(n, 8, size, size, device=device)
    torch.manual_seed(0)
    y = F.drop_block(x, p, block)
    per_map = (y == 0).flatten(2).float().mean(-1).flatten()
    assert abs(per_map.mean().item() - p) < sigma_tol(per_map)
    # E[out] == x at every position: the mean over maps of each position is 1
    mean = y.flatten(0, 1).mean(0)
    spread = y.flatten(0, 1).std(0).max().item()
    assert (mean - 1).abs().max().item() < 6 * spread / (n * 8) ** 0.5


def test_dropped_regions_are_whole_blocks(device):
    # one seed's block in an otherwise kept map: exactly a block x block square of zeros
    x = torch.ones(3000, 1, 12, 12, device=device)
    torch.manual_seed(1)
    y = F.drop_block(x, 0.02, 4)
    dropped = (y == 0).cpu()
    one = dropped.flatten(1).sum(1) == 16
    assert one.any()
    for m in dropped[one][:50]:
        rows, cols = m[0].nonzero(as_tuple=True)
        assert rows.max() - rows.min() == 3 and cols.max() - cols.min() == 3


def test_shared_channels_drop_the_same_positions_in_every_channel(device):
    y = F.drop_block(torch.ones(8, 6, 14, 14, device=device), 0.3, 5, shared_channels=True)
    dropped = y == 0
    assert dropped.any() and torch.equal(dropped, dropped[:, :1].expand_as(dropped))


def test_dropout2d_drops_whole_maps_at_rate_p(device):
    x = torch.ones(512, 64, 8, 8, device=device)  # large enough for the fused path
    torch.manual_seed(2)
    y = F.dropout2d(x, 0.25)
    maps = y.flatten(2)
    kept = (maps != 0).all(-1)
    assert torch.equal(kept | (maps == 0).all(-1), torch.ones_like(kept))
    frac = 1 - kept.float().mean().item()
    assert abs(frac - 0.25) < sigma_tol((~kept).double())
    assert torch.allclose(maps[kept], torch.full_like(maps[kept], 1 / 0.75))


def test_the_backward_saves_no_float_mask(device):
    x = torch.randn(8, 32, 28, 28, device=device, requires_grad=True)
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = F.drop_block(x, 0.1, 7)
    # no tensor (the key and the plan stay on the autograd node), at most a 28x28 scale map:
    # nothing of x's size
    assert max((t.numel() for t in saved), default=0) <= 28 * 28
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert torch.equal(g, y.detach() / x.detach()) or torch.allclose(g, y / x, rtol=1e-6)


# ----------------------------------------------------------- compiled for a real GPU

@pytest.mark.slow
def test_every_kernel_compiles_for_an_h100(tmp_path):
    # The interpreter runs the kernels' code but compiles nothing; a GPU's compilation differs
    # (an integer argument equal to 1 becomes a constant, types are checked for the target).
    # Each launch plugdrop makes for a set of geometries, dtypes and layouts is compiled as
    # the JIT would, to sm_90 binary (Triton's own ptxas), in a process without the
    # interpreter: no GPU needed.
    import os
    import subprocess
    import sys

    from plugdrop._kernels import gpu

    if not gpu.available():
        pytest.skip("Triton is not installed here")
    try:  # what the compiling script types arguments with (Triton 3.3 on)
        from triton._C.libtriton import native_specialize_impl  # noqa: F401
    except ImportError:
        import triton

        pytest.skip(f"Triton {triton.__version__} has no native_specialize_impl, which the "
                    f"compile check types the kernels' arguments with")
    script = os.path.join(os.path.dirname(__file__), "_triton_compile.py")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # compiled here, not taken from a cache
    proc = subprocess.run([sys.executable, script, "90"], capture_output=True, text=True,
                          env=env, timeout=600)
    if proc.returncode != 0 and "ptxas" in proc.stderr and "No such file" in proc.stderr:
        pytest.skip("this Triton has no ptxas")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "kernels compiled for sm_90" in proc.stdout
    for kernel in ("_seeds_kernel", "_rows_kernel", "_rows_cl_kernel", "_apply_kernel",
                   "_noise_kernel"):
        assert f"compiled {kernel}:" in proc.stdout
    # the row kernel's pass on 12-wide maps (rows of 48 and 24 bytes): x read in vectors, not
    # element by element, and bfloat16 rounded by the GPU's conversion, not by hand
    memory = {line.split(": ")[0]: line for line in proc.stdout.splitlines()
              if line.startswith("memory of _rows_kernel W=12 ")}
    for dtype in ("*fp32", "*bf16"):
        line = memory[f"memory of _rows_kernel W=12 {dtype} scaled"]
        vector, scalar16, rounding = map(int, re.findall(r"(\d+) [\w-]+ (?:loads|conv)", line))
        assert vector > 0 and scalar16 == 0, line
        assert rounding > 0 if dtype == "*bf16" else rounding == 0, line


# ---------------------------------------------------------------------- torch.compile

def test_compiled_is_one_graph_with_the_eager_mask_for_a_key(device):
    torch._dynamo.reset()
    x = torch.randn(2, 4, 12, 12, device=device, requires_grad=True)
    key = torch.tensor([5, 7])

    def f(t, p):
        return kernel_ops.block_drop(t, p, key, 4, [3, 3], True)

    counts = []

    def backend(gm, inputs):
        counts.append(1)
        return gm.forward

    compiled = torch.compile(f, backend=backend, fullgraph=True)
    for p in (0.1, 0.2, 0.3):  # a changing p: one graph
        pt = torch.tensor(p)
        y_eager = f(x, pt)
        y_comp = compiled(x, pt)
        assert torch.equal(y_eager, y_comp)
        g_eager = torch.autograd.grad(y_eager, x, torch.ones_like(y_eager))[0]
        g_comp = torch.autograd.grad(y_comp, x, torch.ones_like(y_comp))[0]
        assert torch.equal(g_eager, g_comp)
        # and the same as the float-p eager path's kernel for that key
        q = geometry.solve_keep(p, (12, 12), (3, 3))
        scale = geometry.scale_map(q, (12, 12), (3, 3), x.device, torch.float32)
        ref = _gb().block_drop(x.detach(), scale, (5, 7), cext.thresholds(1 - q), 4, (10, 10),
                               (3, 3))
        assert torch.equal(y_eager.detach(), ref)
    assert len(counts) == 1
    torch._dynamo.reset()


def test_the_compiled_op_is_left_out_of_inductors_cuda_graphs():
    # It reads p on the host (a graph replay would keep the p of its capture) and keeps
    # constants per p (made in a graph's memory pool, untracked: "Detected 2 tensor(s) in the
    # cudagraph pool not tracked as outputs"): inductor cuts its CUDA graphs around it.
    tag = getattr(torch.Tag, "cudagraph_unsafe", None)
    if tag is None:
        pytest.skip("this torch has no cudagraph_unsafe tag (a CPU p skips CUDA graphs)")
    assert tag in torch.ops.plugdrop.block_drop.default.tags


def test_the_compiled_key_is_drawn_on_the_kernels_device(device):
    # traced: the key of a tensor the Triton kernels serve is drawn on its device (inductor's
    # graph-safe generator there), the C kernel's on the CPU
    torch._dynamo.reset()
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.randn(2, 4, 12, 12, device=device)
    p = torch.tensor(0.2)
    torch.compile(lambda t, q: F.drop_block(t, q, 3), backend=backend, fullgraph=True)(x, p)
    (randint,) = [n for n in graphs[0].graph.nodes if "randint" in str(n.target)]
    assert randint.kwargs.get("device") == x.device  # named: not the default device
    torch._dynamo.reset()


def test_a_compiled_scheduled_dropblock_reads_p_on_the_host(device):
    # On an accelerator p would otherwise be a device scalar (a synchronization to read it).
    from plugdrop._kernels import gpu

    assert kernel_ops.host_p(torch.device("cuda")) == gpu.serves(torch.device("cuda"))
    assert kernel_ops.host_p(torch.device("cuda")) == torch.cuda.is_available()
    t = pd.DropBlock(pd.linear(0.0, 0.2, steps=4), 3)
    assert not kernel_ops.host_p(torch.device("cpu"))
    assert isinstance(t._values(torch.device(device))["p"], float)  # eager: the float


# ----------------------------------------------------------------------------- noise

@pytest.mark.parametrize("multiplicative", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_noise_is_standard_normal_reproducible_and_differentiable(device, multiplicative,
                                                                   dtype):
    x = torch.full((128, 64, 8, 8), 2.0, device=device, dtype=dtype, requires_grad=True)
    torch.manual_seed(3)
    y = F.gaussian_noise(x, 0.5, multiplicative=multiplicative)
    torch.manual_seed(3)
    assert torch.equal(y, F.gaussian_noise(x, 0.5, multiplicative=multiplicative))
    assert y.dtype == dtype
    z = ((y - x) / (0.5 * (x if multiplicative else 1))).detach().double().flatten()
    n = z.numel()
    assert abs(z.mean().item()) < sigma_tol(z)
    rounding = 0.02 if dtype == torch.bfloat16 else 0.0
    assert abs(z.std().item() - 1.0) < 5 * (0.5 / n) ** 0.5 + rounding
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    want = (1 + 0.5 * z.view_as(x)) if multiplicative else torch.ones_like(x)
    assert torch.allclose(g.double(), want.double(), atol=0.02 if dtype == torch.bfloat16
                          else 1e-5)


def test_noise_is_the_same_in_every_layout(device):
    x0 = torch.randn(4, 6, 10, 10, device=device)
    outs = {}
    for name, x in memory_layouts(x0).items():
        torch.manual_seed(9)
        outs[name] = F.gaussian_noise(x, 0.3)
    want = outs.pop("contiguous")
    assert all(torch.equal(v, want) for v in outs.values())


# --------------------------------------------------------------- the conformance suite

class _OnTriton:
    @pytest.fixture(autouse=True)
    def _triton(self, monkeypatch):
        triton_path(monkeypatch)

    # Through the hooks, the kernels' calls are the same: one shape (the one of 65,536
    # elements, where the fused paths start) instead of three (the suite's time).
    @pytest.mark.parametrize("device", ["cpu"])
    @pytest.mark.parametrize("shape", [LAYOUT_SHAPES[1]])
    def test_same_seed_same_mask_in_every_memory_layout_through_hooks(self, shape, device):
        super().test_same_seed_same_mask_in_every_memory_layout_through_hooks(  # type: ignore[misc]
            shape, device)


class TestDropBlockTriton(_OnTriton, ForwardConformance):
    value = 0.1  # (the interpreter walks the seeds one by one: at 0.3, three times as many)

    def make(self, value):
        return pd.DropBlock(value, block_size=3)


class TestDropout2dTriton(_OnTriton, ForwardConformance):
    value = 0.1  # (the fused path serves its layout tests' 65,536 elements on small maps)

    def make(self, value):
        return pd.Dropout2d(value)


class TestGaussianNoiseTriton(_OnTriton, ForwardConformance):
    setting = "std"

    def make(self, value):
        return pd.GaussianNoise(value)

    def multiplier(self, x, y):
        return torch.ones_like(x)


class TestMultiplicativeNoiseTriton(_OnTriton, ForwardConformance):
    setting = "std"

    def make(self, value):
        return pd.GaussianNoise(value, multiplicative=True)


def test_the_model_trains_with_the_kernels(device):
    # a step of a small conv net with DropBlock and noise on the Triton kernels
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                      nn.ReLU()).to(device).train()
    pd.attach(m, "1", pd.DropBlock(0.2, 3))
    pd.attach(m, "3", pd.GaussianNoise(0.1))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(4, 3, 12, 12, device=device)
    before = [p.detach().clone() for p in m.parameters()]
    m(x).square().mean().backward()
    opt.step()
    assert all(torch.isfinite(p).all() for p in m.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, m.parameters()))

"""Triton kernels for accelerator tensors. Private.

- :mod:`.seeds`      DropBlock's seeds by the C kernel's generator (the same seeds for the same
  key, so the same mask on every device)
- :mod:`.rows`       the pass over ``x`` on maps at most 64 wide: each map row's mask made
  once, the blocks grown and applied with the scale
- :mod:`.blockdrop`  DropBlock and Dropout2d: the pass over wider maps, the launches prepared
  once per geometry
- :mod:`.noise`      Gaussian noise fused with the add or multiply (one pass)
- :mod:`.common`     what the kernels share (rounding to bfloat16 as a GPU does)

- :mod:`.runtime`    whether Triton is here (:func:`available`) and interprets

A mask's key (two 32-bit words) is drawn from torch's CPU generator in eager mode (the C
kernel's key: one seed draws the same mask on every device) and passed to the launch as two
numbers; while a CUDA graph captures the tensor's stream, it is drawn on the tensor's device by
torch's generator and the kernels read it from there (:func:`draw_key`, :func:`key_words`):
the captured launch then reads the key that each replay's draw writes (torch's generator is
graph-safe: its offset advances at every replay), so every replay draws a new mask, and
``torch.manual_seed`` before the replays reproduces them.

Triton ships with PyTorch's CUDA wheels. Where it is missing, :func:`available` is false, and
where its kernels fail on a GPU, :func:`works_on` is; the dispatch then takes the torch-op
paths (the same law of masks).
A CPU tensor runs these kernels only when a test asks for it (:data:`ON_CPU`) in a process
started with ``TRITON_INTERPRET=1`` (Triton's interpreter: slow but exact, which is how
their exactness is proven on machines without a GPU; the test suite sets it where no GPU is).
"""

from __future__ import annotations

import warnings

import torch

from ..._compat import constant_result
from .runtime import available, interpreted, triton_module

__all__ = ["DEVICE_KEY", "ON_CPU", "available", "draw_key", "interpreted", "key_words", "keyed_on_device",
           "runs_on", "serves", "triton_module", "works_on"]

#: Run the kernels on CPU tensors too, through Triton's interpreter (tests switch it on).
ON_CPU = False

#: Draw every key on the tensor's device and have the kernels read it there, as under a CUDA
#: graph's capture, also outside one (tests switch it on: on CPU tensors, through Triton's
#: interpreter, the kernels then read the key from memory as a captured launch does).
DEVICE_KEY = False


def keyed_on_device(x: torch.Tensor) -> bool:
    """Whether the key of a mask of ``x`` is drawn and read on its device: while a CUDA graph
    captures the current stream, or with :data:`DEVICE_KEY`."""
    return DEVICE_KEY or (x.is_cuda and torch.cuda.is_current_stream_capturing())


def draw_key(x: torch.Tensor) -> torch.Tensor:
    """The key of one mask (or one noise field) of ``x``: two 32-bit words (int64) from
    torch's CPU generator, or, while a CUDA graph captures the current stream (or with
    :data:`DEVICE_KEY`), from torch's generator of ``x``'s device, on that device (graph-safe:
    a new key at every replay, read by the kernels there, :func:`key_words`). The two draws
    give the same words for the same seed where the device is the CPU."""
    if keyed_on_device(x):
        return torch.randint(0, 2**32, (2,), dtype=torch.int64, device=x.device)
    return torch.randint(0, 2**32, (2,), dtype=torch.int64)


def key_words(key: torch.Tensor | tuple[int, int]) -> tuple[int, int] | tuple[torch.Tensor]:
    """What a Triton launch takes for ``key`` (from :func:`draw_key`): its two words read on
    the host where it is a CPU tensor (eager mode), else ``(key,)``, the tensor itself, which
    the kernels read on the device (no synchronization; under a CUDA graph, each replay's
    key). With :data:`DEVICE_KEY`, always the tensor; two ints (a key drawn on the host) as
    they are."""
    if isinstance(key, tuple):
        return key
    if DEVICE_KEY or key.device.type != "cpu":
        return (key,)
    k0, k1 = key.tolist()
    return (k0, k1)


def serves(device: torch.device) -> bool:
    """Whether these kernels serve tensors on ``device``: a CUDA (or ROCm) device with Triton
    where they compile and run (:func:`works_on`), or the CPU while :data:`ON_CPU` is set under
    Triton's interpreter."""
    if device.type == "cuda":
        return available() and works_on(device.index)
    return ON_CPU and device.type == "cpu" and interpreted()


_WORKS: dict[int | None, bool] = {}


@constant_result
def works_on(index: int | None) -> bool:
    """Whether the kernels compile and run on CUDA device ``index`` (None: the current one),
    tried once per device on a tiny tensor (as the C kernel is built at first use). Where they
    do not (a GPU Triton does not support, a broken toolchain), a warning says so once and the
    torch-op paths serve the device: the same law of masks."""
    ok = _WORKS.get(index)
    if ok is None and not torch.cuda.is_available():
        return False  # no GPU to try them on (nothing to warn of)
    if ok is None:
        mode = torch.cuda.get_sync_debug_mode()
        try:
            # its checks read the results back once: not a synchronization to report
            if mode:
                torch.cuda.set_sync_debug_mode(0)
            _probe(torch.device("cuda", index) if index is not None else torch.device("cuda"))
            ok = True
        except Exception as e:  # a failing toolchain must never break training
            first = (str(e).strip().splitlines() or [""])[0][:300]
            warnings.warn(f"plugdrop: the Triton kernels cannot run on this GPU "
                          f"({type(e).__name__}: {first}); DropBlock, Dropout2d and "
                          f"GaussianNoise use their torch-op paths there (the same law of "
                          f"masks; PLUGDROP_NO_TRITON=1 chooses them without trying)",
                          RuntimeWarning, stacklevel=2)
            ok = False
        finally:
            if mode:
                torch.cuda.set_sync_debug_mode(mode)
        _WORKS[index] = ok
    return ok


def _probe(device: torch.device) -> None:
    """Each kernel once on a tiny tensor of ``device``, its result checked."""
    from .. import cext
    from . import blockdrop, noise

    x = torch.ones(1, 2, 4, 4, device=device)
    for layout in (x, x.contiguous(memory_format=torch.channels_last)):
        y = blockdrop.block_drop(layout, None, (1, 2), cext.thresholds(1.0), 2, (3, 3), (2, 2))
        if not bool((y == 0).all()):  # a seed everywhere: all dropped
            raise RuntimeError("the DropBlock kernel's mask is wrong on this device")
    wide = torch.ones(1, 1, 1, 70, device=device)
    if not bool((blockdrop.block_drop(wide, None, (1, 2), cext.thresholds(1.0), 1, (1, 70),
                                      (1, 1)) == 0).all()):
        raise RuntimeError("the DropBlock kernel's mask is wrong on this device")
    if not bool(torch.isfinite(noise.noise(x, (1, 2), 0.1, False)).all()):
        raise RuntimeError("the noise kernel's output is wrong on this device")


def runs_on(x: torch.Tensor) -> bool:
    """:func:`serves` of ``x``'s device."""
    return serves(x.device)



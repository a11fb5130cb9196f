"""The optional fused CPU kernel for sparse DropBlock (``_csrc/blockdrop.c``). Private.

The kernel draws the seeds itself from a counter-based generator keyed by two 32-bit words that
:func:`draw_key` takes from torch's generator (so ``torch.manual_seed`` reproduces the mask and
checkpointing replays it); :func:`hashed_seeds` is the same generator in torch ops.

Built at first use with the system C compiler and loaded with ctypes (:mod:`.cbuild`; its
CPython entry point, where it is built, serves :meth:`Prepared.bound`). Where no compiler is
found, the build fails, or ``PLUGDROP_NO_CEXT=1`` is set, :func:`blockdrop` returns ``None``
and plugdrop uses the torch-op path: the same distribution of masks, drawn differently (other
masks for the same seed).
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable

import torch

from .. import _compat
from . import draws
from .cbuild import SOURCE as _SOURCE
from .cbuild import extension, library

_DTYPES = {torch.float32: 0, torch.float64: 1}


def sample_layout(t: torch.Tensor) -> int | None:
    """0 if each sample of channels-first ``t`` is [C, *spatial] contiguous, 1 if it is
    [*spatial, C] (channels last), None otherwise."""
    shape, stride = t.shape, t.stride()
    n = t.dim()
    expect = 1
    for d in range(n - 1, 0, -1):  # channels-first within a sample
        if shape[d] != 1 and stride[d] != expect:
            break
        expect *= shape[d]
    else:
        return 0
    c = shape[1]
    if shape[1] == 1 or stride[1] == 1:
        expect = c
        for d in range(n - 1, 1, -1):
            if shape[d] != 1 and stride[d] != expect:
                return None
            expect *= shape[d]
        return 1
    return None


def applies(x: torch.Tensor) -> bool:
    """Whether :func:`blockdrop` can run on ``x`` (dtype, device, rank and memory layout)."""
    return (x.dtype in _DTYPES and x.device.type == "cpu" and 3 <= x.dim() <= 5
            and (x.is_contiguous() or sample_layout(x) is not None)
            and library() is not None)


def odd_layout(x: torch.Tensor) -> bool:
    """Whether ``x`` is of a dtype, device and rank the kernel takes but in a memory order it
    does not (neither contiguous nor channels-last per sample: a transposed or strided view):
    its contiguous copy would be taken, and would draw the mask a contiguous ``x`` draws."""
    return (x.dtype in _DTYPES and x.device.type == "cpu" and 3 <= x.dim() <= 5
            and not x.is_contiguous() and sample_layout(x) is None)


def draw_key() -> torch.Tensor:
    """Two 32-bit words (int64) from torch's default CPU generator: the key of one mask."""
    return torch.randint(0, 2**32, (2,), dtype=torch.int64)


#: seed-grid positions per block of the generator (``_csrc/blockdrop.c``)
BLOCK = 256
#: elements below which the kernel runs a call on one thread (``GRAIN`` in ``_csrc/blockdrop.c``)
GRAIN = 65536


def _u32(prob: float) -> int:
    return min(max(round(prob * 2.0**32), 0), 2**32 - 1)


@functools.lru_cache(maxsize=256)
def thresholds(gamma: float) -> tuple[int, ...]:
    """The generator's 32-bit thresholds for seed probability ``gamma`` (see
    ``_csrc/blockdrop.c``), 32 ints: ``T_16 .. T_1`` (``T_i = q**(16 i)``, ``q = 1 - gamma``),
    then ``0, R_15 .. R_1`` (``R_i = (q**i - q**16) / (1 - q**16)``), both ascending, in units
    of ``2**-32``. ``gamma == 0`` gives ``T`` of ``2**32``: no seeds."""
    if gamma <= 0.0:
        return (2**32,) * 16 + (0,) * 16
    log_q = math.log1p(-gamma) if gamma < 1.0 else -math.inf
    t = [_u32(math.exp(16 * i * log_q)) for i in range(16, 0, -1)]
    den = -math.expm1(16 * log_q)
    r = [_u32(math.exp(i * log_q) * -math.expm1((16 - i) * log_q) / den)
         for i in range(15, 0, -1)]
    return (*t, 0, *r)


@functools.lru_cache(maxsize=256)
def _thresholds_array(thresh: tuple[int, ...]) -> ctypes.Array:
    return (ctypes.c_int64 * 32)(*thresh)


_M32 = 0xFFFFFFFF


def _mix(v: torch.Tensor) -> torch.Tensor:
    """Wellons' lowbias32 on int64 tensors holding 32-bit values (products wrap mod 2**64)."""
    v = v ^ (v >> 16)
    v = (v * 0x7FEB352D) & _M32
    v = v ^ (v >> 15)
    v = (v * 0x846CA68B) & _M32
    return v ^ (v >> 16)


def _hash(n: torch.Tensor, k0: int, k1: int) -> torch.Tensor:
    return _mix(_mix((n & _M32) ^ k0) ^ (n >> 32) ^ k1)


def hashed_seeds(key: tuple[int, int], thresh: tuple[int, ...],
                 total: int, first_block: int = 0) -> torch.Tensor:
    """The seeds the kernel's generator draws among ``total`` positions of the flattened seed
    grid ``(B, channels, *valid)`` (the positions whose block fits in the map), sorted, int64:
    the reference definition of its generator in torch ops (the kernel's fallback and the
    tests'). With ``first_block``, only those from position ``256 * first_block`` on."""
    k0, k1 = key
    if thresh[0] >= 2**32 or total <= 0:
        return torch.zeros(0, dtype=torch.int64)
    t = torch.tensor(thresh[:16], dtype=torch.int64)
    r = torch.tensor(thresh[16:], dtype=torch.int64)
    blocks = torch.arange(first_block, (total + BLOCK - 1) // BLOCK, dtype=torch.int64)
    pos = torch.full_like(blocks, -1)
    found = []
    for k in range(BLOCK):  # draw k of every block still open: the gap to its next seed
        n = blocks * BLOCK + k
        h = 16 - (t <= _hash(n, k0, k1)[:, None]).sum(1)
        gap = 16 * h + 16 - (r <= _hash(n, k1, k0)[:, None]).sum(1)
        pos = pos + 1 + gap
        inside = pos < BLOCK
        found.append((blocks * BLOCK + pos)[inside])
        open_ = pos < BLOCK - 1
        blocks, pos = blocks[open_], pos[open_]
        if blocks.numel() == 0:
            break
    n = torch.cat(found).sort().values
    return n[n < total]


#: leading sizes of 1 that make the spatial sizes of a tensor of each rank three
_PAD = {3: (1, 1), 4: (1,), 5: ()}


class Prepared:
    """The kernel's call for one tensor geometry (shape, strides, dtype) and one mask law
    (scale map, thresholds, block size, shared or per channel), its arguments converted and
    packed once (``plugdrop_blockdrop_packed``): a call then costs an empty output, the two
    key words and one foreign call of six arguments. Built by :func:`prepare`; call it only on
    a tensor that :meth:`fits`."""

    __slots__ = ("shape", "stride", "dtype", "scale", "_fn", "_keyed", "_args", "_law",
                 "_out_stride", "_like")

    def __init__(self, lib: ctypes.CDLL, x: torch.Tensor, layout: int, scale: torch.Tensor,
                 thresh: tuple[int, ...], blocks: tuple[int, ...], shared: bool) -> None:
        shape = x.shape
        n = x.dim()
        self.shape = shape
        self.stride = x.stride()
        self.dtype = x.dtype
        if layout == 0:
            out_stride = _contiguous_strides(shape)
        else:  # channels innermost: strides (S*C, 1, ..., C)
            strides = [0] * n
            strides[1] = 1
            acc = shape[1]
            for d in range(n - 1, 1, -1):
                strides[d] = acc
                acc *= shape[d]
            strides[0] = acc
            out_stride = tuple(strides)
        self._out_stride = out_stride
        # ``x`` laid out as the output: ``empty_like`` makes the output (cheaper than
        # ``empty_strided``; it keeps the strides of a dense tensor)
        self._like = self.stride == out_stride
        spatial = shape[2:]
        if scale.dtype != x.dtype or scale.shape != spatial or not scale.is_contiguous():
            with _compat.constants():  # kept with the plan: not a torch.func transform's
                scale = scale.to(x.dtype).expand(spatial).contiguous()
        self.scale = scale  # kept alive: the kernel reads it through its address
        self._fn = lib.plugdrop_blockdrop_packed
        self._keyed = lib.plugdrop_blockdrop_key
        self._law = _thresholds_array(thresh)  # kept alive: read through its address
        pad = _PAD[n]
        out_bstride = out_stride[0] if layout else math.prod(shape[1:])
        self._args = (ctypes.c_int64 * 15)(
            _DTYPES[x.dtype], scale.data_ptr(), ctypes.addressof(self._law), shape[0],
            self.stride[0], out_bstride, shape[1], *pad, *spatial, *pad, *blocks, layout,
            int(shared))

    def fits(self, x: torch.Tensor) -> bool:
        """Whether ``x`` has the geometry this call was prepared for (a CPU tensor)."""
        return (x.stride() == self.stride and x.shape == self.shape and x.dtype == self.dtype
                and x.is_cpu)

    def __call__(self, x: torch.Tensor, k0: int, k1: int) -> torch.Tensor | None:
        """The kernel on ``x`` with key ``(k0, k1)``: a new tensor, ``None`` if the kernel
        failed (it could not allocate its scratch memory)."""
        if self._like:
            out = torch.empty_like(x)
        else:
            out = torch.empty_strided(self.shape, self._out_stride, dtype=self.dtype)
        if self._fn(self._args, torch.get_num_threads(), x.data_ptr(), out.data_ptr(), k0,
                    k1) != 0:
            return None
        return out

    def keyed(self, x: torch.Tensor, key: torch.Tensor) -> torch.Tensor | None:
        """:meth:`__call__` with the key read by the kernel from ``key`` (two int64 words in a
        CPU tensor, :func:`.draws.drawn_key`): one foreign call, no read-back of the key."""
        if self._like:
            out = torch.empty_like(x)
        else:
            out = torch.empty_strided(self.shape, self._out_stride, dtype=self.dtype)
        if self._keyed(self._args, torch.get_num_threads(), x.data_ptr(), out.data_ptr(),
                       key.data_ptr()) != 0:
            return None
        return out


    def bound(self, x: torch.Tensor) -> Callable[[], torch.Tensor | None]:
        """:meth:`keyed` on ``x`` with a new key, bound once, for a tensor ``x`` this call fits
        and that stays the same (the caller keeps it alive and unchanged: the kernel reads it
        through its address) of fewer than :data:`GRAIN` elements (the kernel runs it on one
        thread whatever the thread count): ``f()`` draws a key into this thread's key tensor
        (:func:`.draws.drawn_key`'s draw; :func:`.draws.last_key` reads it) and gives the
        kernel's new tensor for it, or ``None`` (:meth:`__call__`'s). The same call as
        :meth:`keyed`, with what it looks up per call fixed; through the library's CPython
        entry point where it has one (:func:`.cbuild.extension`), else ctypes."""
        if not self.fits(x) or x.numel() >= GRAIN:
            raise ValueError(f"a bound kernel call takes a tensor of the prepared geometry of "
                             f"fewer than {GRAIN} elements, got {tuple(x.shape)}")
        ext = extension()
        # the CPython entry point takes the packed arguments by address; the closure keeps
        # them (and this call, whose scale and law they point to) alive
        fn: Callable[..., int] = self._keyed if ext is None else ext.keyed
        args: object = self._args if ext is None else ctypes.addressof(self._args)
        address, keep, keys, first = x.data_ptr(), self, draws.KEYS, draws.key_buffer
        like, empty_like, empty_strided = self._like, torch.empty_like, torch.empty_strided

        def run() -> torch.Tensor | None:
            try:
                key, at = keys.buf, keys.address
            except AttributeError:  # this thread's first draw
                key = first()
                at = keys.address
            key.random_(0, 2**32)
            out = empty_like(x) if like else empty_strided(keep.shape, keep._out_stride,
                                                            dtype=keep.dtype)
            return None if fn(args, 1, address, out.data_ptr(), at) else out
        return run


def _contiguous_strides(shape: torch.Size) -> tuple[int, ...]:
    strides = []
    acc = 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(strides))


def prepare(x: torch.Tensor, scale: torch.Tensor, thresh: tuple[int, ...],
            blocks: tuple[int, ...], shared: bool = False) -> Prepared | None:
    """The kernel's call prepared for tensors like ``x`` (see :func:`blockdrop` for the
    arguments); ``None`` if the kernel does not apply to ``x`` (dtype, layout, device) or is
    unavailable."""
    n = x.dim()
    if x.dtype not in _DTYPES or x.device.type != "cpu" or n < 3 or n > 5:
        return None
    lib = library()
    if lib is None:
        return None
    layout = 0 if x.is_contiguous() else sample_layout(x)
    if layout is None:
        return None
    return Prepared(lib, x, layout, scale, thresh, blocks, shared)


def blockdrop(x: torch.Tensor, scale: torch.Tensor, key: tuple[int, int],
              thresh: tuple[int, ...],
              blocks: tuple[int, ...], shared: bool = False) -> torch.Tensor | None:
    """``x * scale`` with the blocks of the seeds drawn from ``key`` zeroed, as one fused pass;
    ``None`` if the fused kernel does not apply (dtype, layout, device) or is unavailable. With
    ``shared``, seeds are drawn on a ``(B, 1, *valid)`` grid and drop their block in every
    channel. ``scale``: the multiplier of each map position (broadcast to the spatial sizes)."""
    call = prepare(x, scale, thresh, blocks, shared)
    return None if call is None else call(x, key[0], key[1])


def noise(x: torch.Tensor, key: torch.Tensor, std: float, multiplicative: bool,
          strides: tuple[int, ...]) -> torch.Tensor | None:
    """``x + std * z`` (or ``x * (1 + std * z)``), ``z`` standard normal per element drawn
    from ``key`` by the kernel's counter-based generator, in the memory layout ``strides``;
    ``None`` if the kernel does not apply (float32 CPU tensors of a dense layout only)."""
    if x.dtype != torch.float32 or x.device.type != "cpu" or not is_dense(x.shape, strides):
        return None
    lib = library()
    if lib is None:
        return None
    if x.stride() != strides:
        x = torch.empty_strided(x.shape, strides, dtype=x.dtype).copy_(x)
    out = torch.empty_strided(x.shape, strides, dtype=x.dtype)
    k0, k1 = key.tolist()
    lib.plugdrop_noise(torch.get_num_threads(), x.data_ptr(), out.data_ptr(), x.numel(), k0,
                       k1, std, int(multiplicative))
    return out


def is_dense(shape: tuple[int, ...] | torch.Size, strides: tuple[int, ...]) -> bool:
    """True if ``strides`` lay ``shape`` over exactly ``numel`` consecutive elements."""
    dims = sorted((st, sz) for st, sz in zip(strides, shape) if sz != 1)
    expect = 1
    for st, sz in dims:
        if st != expect:
            return False
        expect *= sz
    return True

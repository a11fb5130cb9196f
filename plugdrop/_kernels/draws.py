"""Bernoulli draws on the tensor's own device; sparse (geometric gaps) on CPU. Private.

Masks are born on the input's device with torch's own generators, so ``torch.manual_seed``
reproduces them and activation checkpointing, which restores the RNG state, replays them.
"""

from __future__ import annotations

import math
import threading

import torch

from .. import _compat

#: Above this probability the dense path (a random number per position) is used on CPU:
#: a sparse draw costs about twice a dense one per success, and the fill costs per success.
SPARSE_MAX_GAMMA = 0.3
#: Below this many positions the dense path is cheaper whatever the probability.
SPARSE_MIN_NUMEL = 4096


def sparse_seeds(total: int, gamma: float) -> torch.Tensor:
    """Sorted positions in ``[0, total)`` of a Bernoulli(``gamma``) process, as int64.

    The gaps between successive successes of independent Bernoulli trials are
    Geometric(``gamma``); a gap is drawn as ``1 + floor(log(1 - u) / log(1 - gamma))`` from a
    uniform ``u`` of torch's generator (so ``torch.manual_seed`` reproduces it). Uniforms are
    float32, as in ``torch.rand(...) < p``, so the law is exact to the same 2**-24 resolution;
    the gaps are computed in float64 when they could exceed float32's exact integers. Costs
    O(``gamma * total``) random numbers instead of one per position. CPU only (the final cut
    reads a value on the host).
    """
    if gamma <= 0.0:  # a rate so small it underflowed: no success
        return torch.empty(0, dtype=torch.int64)
    log_q = math.log1p(-gamma)
    wide = 17.0 / gamma > 2**23  # the largest gap float32 uniforms can give
    parts = []
    last = -1
    while True:
        expected = (total - 1 - last) * gamma
        k = int(expected + 6.0 * math.sqrt(expected) + 16)
        u = torch.rand(k, dtype=torch.float64 if wide else torch.float32)
        # a gap past the end ends the draw whatever its size: capped, it fits an int64
        gaps = torch.log1p(u.neg_()).div_(log_q).floor_().add_(1.0).clamp_(max=total + 1.0)
        pos = gaps.to(torch.int64).cumsum_(0).add_(last)
        end = int(pos[-1])
        if end >= total:
            parts.append(pos[:int(torch.searchsorted(pos, total))])
            break
        parts.append(pos)
        last = end
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def use_sparse(numel: int, prob: float, device: torch.device) -> bool:
    """Whether to draw a Bernoulli(``prob``) field of ``numel`` positions sparsely."""
    return (device.type == "cpu" and prob <= SPARSE_MAX_GAMMA and numel >= SPARSE_MIN_NUMEL
            and not torch.compiler.is_compiling())


def bernoulli(shape: tuple[int, ...], prob, device: torch.device) -> torch.Tensor:
    """Boolean tensor of independent Bernoulli(``prob``) draws (``True`` with probability
    ``prob``). ``prob`` is a float or a 0-dim tensor (then always dense, no host read)."""
    if not isinstance(prob, torch.Tensor):
        numel = math.prod(shape)
        if use_sparse(numel, prob, device):
            out = torch.zeros(shape, dtype=torch.bool)
            if prob > 0.0:
                out.view(-1).index_fill_(0, sparse_seeds(numel, prob), True)
            return out
    return torch.rand(shape, device=device) < prob


#: Small constant tensors by (shape or p, dtype, device), for :func:`keep_mult`: the ones masks
#: are drawn from (by shape: a few per model) and the scales ``1 / (1 - p)`` they are multiplied
#: by (by ``p``: a schedule makes a new one per step, hence the bound).
_CACHE: dict[tuple[object, torch.dtype, torch.device], torch.Tensor] = {}
_CACHE_MAX = 512


def _cached(key: tuple[object, torch.dtype, torch.device], value: float,
            shape: tuple[int, ...]) -> torch.Tensor:
    t = _CACHE.get(key)
    if t is None:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        with _compat.constants():
            t = torch.full(shape, value, dtype=key[1], device=key[2])
        _CACHE[key] = t
    return t


def keep_mult(shape: tuple[int, ...], p: float, scale_by_keep: bool, dtype: torch.dtype,
              device: torch.device) -> torch.Tensor:
    """A new tensor of ``shape`` and ``dtype``: 0 with probability ``p``, else ``1 / (1 - p)``
    (1 without ``scale_by_keep``), independently per element.

    Drawn by ``torch.bernoulli`` from a cached tensor of ones and scaled in place by a cached
    0-dim tensor: two torch calls, each cheaper than its form with a fresh tensor or a Python
    scalar (a scalar operand is wrapped into a tensor at every call). The draws are those of
    ``torch.empty(shape).bernoulli_(1 - p)``, and the scale is applied in ``dtype`` as
    ``mul_(1 / (1 - p))`` does; that form is used while ``torch.compile`` traces (no cache read
    inside a graph).
    """
    if torch.compiler.is_compiling():
        mult = torch.empty(shape, dtype=dtype, device=device).bernoulli_(1.0 - p)
        return mult.mul_(1.0 / (1.0 - p)) if scale_by_keep else mult
    return keep_mult_from(ones(shape, dtype, device), p, scale_by_keep, dtype, device)


def ones(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The cached tensor of ones :func:`keep_mult` draws a mask of ``shape`` from (a caller
    may keep it to skip the lookup: :func:`keep_mult_from`)."""
    return _cached((shape, dtype, device), 1.0, shape)


def keep_mult_from(ones: torch.Tensor, p: float, scale_by_keep: bool, dtype: torch.dtype,
                   device: torch.device) -> torch.Tensor:
    """:func:`keep_mult` of the shape of ``ones`` (from :func:`ones`, of ``dtype`` on
    ``device``), eager mode."""
    mult = torch.bernoulli(ones, 1.0 - p)
    if scale_by_keep:
        scale = _CACHE.get((p, dtype, device))  # keyed by p: one float key per value
        if scale is None:
            scale = _cached((p, dtype, device), 1.0 / (1.0 - p), ())
        mult.mul_(scale)
    return mult


class Ones:
    """A tensor of ones a mask of its shape is drawn from (:func:`keep_mult_from`'s draw), with
    the scale of the last ``p`` it was drawn at: a hook's repeated call on a shape it met draws
    its mask with no lookup (a schedule's new ``p`` looks the scale up once). Made by
    :func:`remember_ones`."""

    __slots__ = ("ones", "last")

    def __init__(self, ones: torch.Tensor) -> None:
        self.ones = ones
        # (p, its scale), replaced as one object: threads (DataParallel's replicas) drawing at
        # other p's never see the scale of one with the p of another
        self.last: tuple[float, torch.Tensor] | None = None

    def mult(self, p: float, scale_by_keep: bool) -> torch.Tensor:
        """``keep_mult_from(self.ones, p, scale_by_keep, ...)``: the same draw and values."""
        mult = torch.bernoulli(self.ones, 1.0 - p)
        if scale_by_keep:
            last = self.last
            if last is None or last[0] != p:  # a new p (a schedule's step, another layer's)
                ones = self.ones
                last = self.last = (p, _cached((p, ones.dtype, ones.device), 1.0 / (1.0 - p),
                                               ()))
            mult.mul_(last[1])
        return mult


def remember_ones(cache: dict[tuple[object, ...], Ones], key: tuple[object, ...],
                  shape: tuple[int, ...]) -> None:
    """Store in ``cache`` under ``key`` (whose 2nd and 3rd items are the dtype and device) the
    :class:`Ones` a mask of ``shape`` is drawn from: the hooks' record of shapes already
    checked. Bounded by clearing."""
    if len(cache) >= 256:
        cache.clear()
    cache[key] = Ones(ones(shape, key[1], key[2]))  # type: ignore[arg-type]


def keep_multiplier(x: torch.Tensor, shape: tuple[int, ...], p: float | torch.Tensor,
                    scale_by_keep: bool) -> torch.Tensor:
    """A multiplier of ``shape`` in ``x``'s dtype: 0 with probability ``p``, else
    ``1 / (1 - p)`` (or 1 without ``scale_by_keep``). A float ``p``: two small torch calls
    (:func:`keep_mult`); a 0-dim tensor ``p`` (``torch.compile``): plain tensor ops."""
    if isinstance(p, torch.Tensor):
        dropped = bernoulli(shape, p, x.device)
        mult = torch.where(dropped, 0.0, 1.0 / (1.0 - p) if scale_by_keep else 1.0)
        return mult.to(x.dtype)
    return keep_mult(shape, p, scale_by_keep, x.dtype, x.device)


#: each thread's tensor of two words that :func:`draw_words` draws into (DataParallel runs
#: replicas in threads: one buffer each, so that no two calls read the same key)
KEYS = threading.local()


def draw_words() -> tuple[int, int]:
    """The two words of a fused kernel's key (:func:`.cext.draw_key`'s) as Python ints: the
    same draws from the same generator (``torch.randint`` is ``random_`` of a new tensor), into
    a tensor kept per thread rather than a new one per call (half the cost)."""
    if _compat.functorch_active():  # a torch.func transform refuses the buffer's mutation
        with _compat.constants():  # a plain tensor: torch 2.4's jvp wraps it, with no storage
            k0, k1 = torch.randint(0, 2**32, (2,), dtype=torch.int64).tolist()
        return k0, k1
    k0, k1 = drawn_key().tolist()
    return k0, k1


def drawn_key() -> torch.Tensor:
    """This thread's tensor of two int64 words, :func:`.cext.draw_key`'s draws made into it
    (the same values from the same generator state); valid until the thread's next draw. Not
    inside a ``torch.func`` transform, which refuses the mutation (:func:`draw_words` knows)."""
    try:
        buf = KEYS.buf
    except AttributeError:
        buf = key_buffer()
    return buf.random_(0, 2**32)


def last_key() -> tuple[int, int]:
    """The two words this thread's last draw into its key tensor (:func:`drawn_key`, or a
    bound kernel call's: :meth:`.cext.Prepared.bound`) drew (not a new draw)."""
    k0, k1 = KEYS.buf.tolist()
    return k0, k1


def key_buffer() -> torch.Tensor:
    """This thread's key tensor, made at its first draw (its address kept with it, in
    ``KEYS.address``)."""
    with _compat.constants():
        buf = KEYS.buf = torch.empty(2, dtype=torch.int64)
    KEYS.address = buf.data_ptr()
    return buf

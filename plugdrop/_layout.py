"""Layouts: views of channels-last and token tensors as channels-first maps. Private.

``channels_first``  ``(B, C, L)``, ``(B, C, H, W)``, ``(B, C, D, H, W)``
``channels_last``   ``(B, L, C)``, ``(B, H, W, C)``, ``(B, D, H, W, C)``
``tokens``          ``(B, N, C)`` with ``N = prefix + H * W``: a patch grid (square unless
                    ``grid_size`` says otherwise, see :func:`tokens_to_grid`) after ``prefix``
                    leading tokens (class, distillation, register tokens), left alone
``sequence``        ``(B, T, C)``: a sequence without a grid (LSTM, TransformerEncoder,
                    MLP-Mixer tokens); acted on along ``T``, as a 1-D map

Every view here is a view (no copy); results are mapped back with the inverse view, so the
input's memory format is kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .errors import SettingError, ShapeError

LAYOUTS = ("channels_first", "channels_last", "tokens", "sequence")


def check_layout(layout: str | None) -> None:
    if layout is not None and layout not in LAYOUTS:
        raise SettingError(
            f"layout must be one of {', '.join(repr(s) for s in LAYOUTS)}, got {layout!r}"
        )


def check_prefix(prefix: int | None) -> None:
    if prefix is None:
        return
    if isinstance(prefix, bool) or not isinstance(prefix, int):
        raise TypeError(f"prefix_tokens must be an int or None, got {type(prefix).__name__}")
    if prefix < 0:
        raise SettingError(f"prefix_tokens must be >= 0, got {prefix}")


def _token_prefix(n: int, prefix: int | None) -> tuple[int, int]:
    """(prefix, side) of a token sequence of length ``n``."""
    if prefix is None:
        side = math.isqrt(n)
        if n - side * side > 2:  # not a square grid after a class (+ distillation) token
            raise ShapeError(
                f"{n} tokens are not a square patch grid after 0, 1 or 2 prefix tokens: give "
                f"grid_size=(H, W) and prefix_tokens (a timm model's patch_embed.grid_size and "
                f"num_prefix_tokens are read at attach), or layout='sequence' for tokens "
                f"without a grid")
        return n - side * side, side
    side = math.isqrt(max(n - prefix, 0))
    if side * side != n - prefix or side == 0:
        raise ShapeError(
            f"{n} tokens minus prefix_tokens={prefix} is not a square patch grid"
        )
    return prefix, side


def _looks_like_tokens(shape: torch.Size) -> bool:
    n = shape[1]
    for k in (1, 2):  # class token, class + distillation token (DeiT)
        side = math.isqrt(max(n - k, 0))
        if side >= 2 and side * side == n - k:
            return True
    return False


def _suspicious(shape: torch.Size) -> str | None:
    """A fix hint when a tensor passed with the default layout looks like another layout."""
    if len(shape) == 3 and shape[2] >= 16 and _looks_like_tokens(shape):
        return (
            "it looks like a token sequence (B, N, C) with a class token, as vision "
            "transformers produce; pass layout='tokens' (layout='sequence' for a sequence "
            "without a patch grid, layout='channels_first' if it really is (B, C, L))"
        )
    # a square H == W read channels-last, a non-square map read channels-first: pvt_v2's
    # (B, 56, 56, 32) patch embedding, swin at 384 px
    if len(shape) == 4 and shape[1] == shape[2] != shape[3] and shape[3] >= 16:
        return (
            "it looks channels-last (B, H, W, C), as swin and other timm models produce; pass "
            "layout='channels_last' (or layout='channels_first' if it really is (B, C, H, W))"
        )
    return None


Restore = Callable[[torch.Tensor], torch.Tensor]


def to_channels_first(x: torch.Tensor, layout: str | None, ranks: tuple[int, ...],
                      what: str, prefix: int | None = None
                      ) -> tuple[torch.Tensor, Restore]:
    """View ``x`` as channels-first ``(B, C, *spatial)``.

    Returns ``(view, restore)``: apply the transform to ``view`` and pass the result
    to ``restore`` to get a tensor in ``x``'s layout. ``ranks`` are the allowed spatial ranks.
    ``layout=None`` is channels-first with a check that the shape does not look like another
    layout. Raises :class:`ShapeError` naming the shape and the fix.
    """
    if not (x.is_floating_point() or x.is_complex()):
        raise TypeError(f"{what} acts on floating-point tensors, got {x.dtype} of shape "
                        f"{tuple(x.shape)}")
    nd = x.dim()
    if layout == "sequence":
        if nd != 3 or 1 not in ranks:
            raise ShapeError(f"{what} with layout='sequence' expects (B, T, C), got shape "
                             f"{tuple(x.shape)}")
        return x.movedim(-1, 1), _from_channels_first
    if layout == "tokens":
        if nd != 3:
            raise ShapeError(
                f"{what} with layout='tokens' expects (B, N, C), got shape {tuple(x.shape)}"
            )
        b, n, c = x.shape
        k, side = _token_prefix(n, prefix)
        if side == 0:
            raise ShapeError(f"{what} got {n} tokens: no patch grid to act on")
        if 2 not in ranks:
            raise ShapeError(f"{what} does not take layout='tokens'")
        head = x[:, :k]
        grid = x[:, k:].reshape(b, side, side, c).movedim(-1, 1)

        def restore_tokens(y: torch.Tensor) -> torch.Tensor:
            y = y.movedim(1, -1).reshape(b, side * side, c)
            return torch.cat([head, y], dim=1) if k else y

        return grid, restore_tokens

    spatial = nd - 2
    if spatial not in ranks:
        allowed = " or ".join(
            {1: "(B, C, L)", 2: "(B, C, H, W)", 3: "(B, C, D, H, W)", 0: "(B, C)"}[r]
            for r in ranks
        )
        hint = ""
        if nd == 2:
            hint = "; a (B, features) output has no spatial map: use Dropout or DropPath"
        raise ShapeError(
            f"{what} expects {allowed} input (channels-first; or the same with "
            f"layout='channels_last'), got shape {tuple(x.shape)} of rank {nd}{hint}"
        )
    if layout is None:
        suspicion = _suspicious(x.shape)
        if suspicion is not None:
            raise ShapeError(f"{what} got shape {tuple(x.shape)}: {suspicion}")
    if layout == "channels_last":
        return x.movedim(-1, 1), _from_channels_first
    return x, _identity


def laid_out_as(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``y``, of ``x``'s shape (computed on ``x.contiguous()``), in the memory order of ``x``:
    its dims ordered by ``x``'s strides (of equal strides, the larger size outer), as an
    elementwise op on ``x`` lays out its result (``x``'s strides when ``x`` is dense;
    channels-last for a channels-last view with gaps). A copy autograd and ``torch.func``
    follow; ``y`` itself when that order is ``y``'s.

    For ops whose random draws follow memory order: ``laid_out_as(op(x.contiguous()), x)``
    draws the same mask for every memory order of the same values."""
    strides, sizes = x.stride(), x.shape
    order = sorted(range(x.dim()), key=lambda d: (-strides[d], -sizes[d], d))
    if order == list(range(x.dim())):
        return y.contiguous()
    inverse = [0] * len(order)
    for i, d in enumerate(order):
        inverse[d] = i
    return y.permute(order).contiguous().permute(inverse)


def _identity(y: torch.Tensor) -> torch.Tensor:
    return y


def _from_channels_first(y: torch.Tensor) -> torch.Tensor:
    return y.movedim(1, -1)


def check_grid(grid: object) -> tuple[int, int] | None:
    if grid is None:
        return None
    if (not isinstance(grid, (tuple, list)) or len(grid) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in grid)):
        raise SettingError(f"grid_size must be (H, W), two ints >= 1, got {grid!r}")
    return (int(grid[0]), int(grid[1]))


def tokens_to_grid(x: torch.Tensor, grid: tuple[int, int], prefix: int
                   ) -> tuple[torch.Tensor, Restore]:
    """View tokens ``(B, prefix + H * W, C)`` as a channels-last grid ``(B, H, W, C)``;
    ``restore`` puts the prefix tokens back in front."""
    if x.dim() != 3 or x.shape[1] != prefix + grid[0] * grid[1]:
        raise ShapeError(f"tokens of shape {tuple(x.shape)} are not prefix_tokens={prefix} + a "
                         f"{grid[0]}x{grid[1]} grid_size")
    b, _, c = x.shape
    head = x[:, :prefix]

    def restore(y: torch.Tensor) -> torch.Tensor:
        y = y.reshape(b, grid[0] * grid[1], c)
        return torch.cat([head, y], dim=1) if prefix else y

    return x[:, prefix:].reshape(b, grid[0], grid[1], c), restore


def describe(shape: tuple[int, ...]) -> str:
    """The layout a map-reading transform would use for an output of ``shape`` by default, or
    what it needs to be told (for :func:`plugdrop.layers`)."""
    nd = len(shape)
    if nd == 3:
        if _suspicious(torch.Size(shape)) is not None:
            return "tokens? (pass layout)"
        return "channels_first (B, C, L)? or sequence / tokens: pass layout"
    if nd == 4:
        if _suspicious(torch.Size(shape)) is not None:
            return "channels_last? (pass layout)"
        return "channels_first"
    if nd == 5:
        return "channels_first"
    return "-"  # no map: Dropout / DropPath territory

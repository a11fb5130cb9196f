"""Forward transforms that drop: blocks, channels, elements, whole samples."""

from __future__ import annotations

from typing import Any

import torch

from .. import _checks, _layout
from .. import functional as F
from ..errors import SettingError
from ..schedules import ScheduleLike
from .base import Check, ForwardTransform

__all__ = ["DropBlock", "Dropout2d", "Dropout", "DropPath", "DropHead"]


class _Layout(ForwardTransform):
    """A forward transform that reads maps in a ``layout`` (see :class:`DropBlock`)."""

    def __init__(self, layout: str | None, prefix_tokens: int | None,
                 **settings: tuple[ScheduleLike, Check]) -> None:
        super().__init__(**settings)
        _layout.check_layout(layout)
        _layout.check_prefix(prefix_tokens)
        self.layout = layout
        self.prefix_tokens = prefix_tokens

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {}
        if self.layout is not None:
            opts["layout"] = self.layout
        if self.prefix_tokens is not None:
            opts["prefix_tokens"] = self.prefix_tokens
        return opts


class DropBlock(_Layout):
    """DropBlock (Ghiasi et al., 2018), exact: the expected dropped fraction is ``p``.

    Args:
        p: fraction of activations to drop, in ``[0, 1)``; a number or a schedule.
        block_size: block side (int) or one size per spatial dim; clipped to the map.
            Default: 7.
        shared_channels: one mask shared by all channels of a sample. Default: ``False``
            (independent per channel, as in the paper).
        layout: ``"channels_first"`` ``(B, C, *spatial)``, ``"channels_last"``
            ``(B, *spatial, C)`` or ``"tokens"`` ``(B, N, C)``. Default ``None``:
            channels-first, with an error if the shape looks like another layout.
        prefix_tokens: leading tokens left alone with ``layout="tokens"`` (default: inferred).
        rescale: ``"expected"`` (default), ``"count"`` or ``"none"``; see
            :func:`plugdrop.functional.drop_block`.

    Shape: 1D, 2D or 3D maps: ``(B, C, L)``, ``(B, C, H, W)``, ``(B, C, D, H, W)``, in the
    given layout. Output: same shape, dtype and memory format.

    Raises:
        SettingError: a bad ``p`` (or a schedule reaching one), ``block_size``, ``layout``,
            ``prefix_tokens`` or ``rescale``.
        TypeError: a setting of the wrong type.
    """

    def __init__(self, p: ScheduleLike, block_size: int | tuple[int, ...] = 7, *,
                 shared_channels: bool = False, layout: str | None = None,
                 prefix_tokens: int | None = None, rescale: str = "expected") -> None:
        super().__init__(layout, prefix_tokens, p=(p, _checks.probability))
        self.block_size = _checks.block_size(block_size)
        self.shared_channels = _checks.flag("shared_channels", shared_channels)
        if rescale not in ("expected", "count", "none"):
            raise SettingError(
                f"rescale must be 'expected', 'count' or 'none', got {rescale!r}")
        self.rescale = rescale

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"block_size": self.block_size}
        if self.shared_channels:
            opts["shared_channels"] = True
        opts.update(super()._options())
        if self.rescale != "expected":
            opts["rescale"] = self.rescale
        return opts

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return F._drop_block(x, p, self.block_size, self.shared_channels, self.layout,
                             self.prefix_tokens, self.rescale)


class Dropout2d(_Layout):
    """Drop whole channels per sample with probability ``p``; rescale by ``1 / (1 - p)``.

    Args:
        p: channel drop probability in ``[0, 1)``; a number or a schedule.
        layout, prefix_tokens: as in :class:`DropBlock`.

    Shape: ``(B, C, *spatial)`` with 0 to 3 spatial dims, or per ``layout``.
    """

    def __init__(self, p: ScheduleLike, *, layout: str | None = None,
                 prefix_tokens: int | None = None) -> None:
        super().__init__(layout, prefix_tokens, p=(p, _checks.probability))

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return F._dropout2d(x, p, self.layout, self.prefix_tokens)


class Dropout(ForwardTransform):
    """Elementwise dropout with probability ``p`` (rescaled by ``1 / (1 - p)``). Any shape.

    Args:
        p: drop probability in ``[0, 1)``; a number or a schedule.
    """

    def __init__(self, p: ScheduleLike) -> None:
        super().__init__(p=(p, _checks.probability))

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return F._dropout(x, p)


class DropPath(ForwardTransform):
    """Stochastic depth: drop whole samples with probability ``p``.

    Attach it to a residual *branch* (e.g. timm's ``blocks.*.mlp``), not to a whole block.

    Args:
        p: sample drop probability in ``[0, 1)``; a number or a schedule.
        scale_by_keep: rescale kept samples by ``1 / (1 - p)``. Default: ``True``.

    Shape: any, with the batch first.
    """

    def __init__(self, p: ScheduleLike, *, scale_by_keep: bool = True) -> None:
        super().__init__(p=(p, _checks.probability))
        self.scale_by_keep = _checks.flag("scale_by_keep", scale_by_keep)

    def _options(self) -> dict[str, Any]:
        return {} if self.scale_by_keep else {"scale_by_keep": False}

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return F._drop_path(x, p, self.scale_by_keep)


class DropHead(ForwardTransform):
    """DropHead (Zhou et al., 2020): drop whole attention heads per sample with probability
    ``p``, rescaling the kept heads by ``1 / (1 - p)``.

    Attach it to the *input* of an attention's output projection, where the heads' outputs lie
    side by side: for timm's ViT-style attention,
    ``attach(vit, "blocks.*.attn.proj", DropHead(0.1, num_heads=vit.blocks[0].attn.num_heads),
    where="input")``.

    Args:
        p: head drop probability in ``[0, 1)``; a number, a schedule or
            :func:`plugdrop.by_depth`.
        num_heads: the number of heads, dividing the channel dim.

    Shape: ``(B, ..., C)`` with ``C = num_heads * head_dim``; output of the same shape.

    Raises:
        ShapeError: ``C`` not divisible by ``num_heads`` (at the forward).
        SettingError: a bad ``p`` or ``num_heads``.
    """

    def __init__(self, p: ScheduleLike, num_heads: int) -> None:
        super().__init__(p=(p, _checks.probability))
        self.num_heads = _checks.count("num_heads", num_heads)

    def _options(self) -> dict[str, Any]:
        return {"num_heads": self.num_heads}

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return F._drop_head(x, p, self.num_heads)

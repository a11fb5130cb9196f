"""Forward transforms that drop: blocks, channels, elements, whole samples."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from .. import _checks, _impl, _layout
from .._kernels import blockdrop, masks
from .._kernels import ops as kernel_ops
from ..errors import SettingError, ShapeError
from ..schedules import ScheduleLike
from .base import Check, ForwardTransform

__all__ = ["DropBlock", "Dropout2d", "Dropout", "DropHead", "DropToken"]


class _Layout(ForwardTransform):
    """A forward transform that reads maps in a ``layout`` (see :class:`DropBlock`)."""

    def __init__(self, layout: str | None, prefix_tokens: int | None,
                 grid_size: tuple[int, int] | None,
                 **settings: tuple[ScheduleLike, Check]) -> None:
        super().__init__(**settings)
        _layout.check_layout(layout)
        _layout.check_prefix(prefix_tokens)
        if (prefix_tokens is not None or grid_size is not None) and layout != "tokens":
            raise SettingError(f"prefix_tokens and grid_size describe token sequences: pass "
                               f"layout='tokens' with them (got layout={layout!r})")
        self.layout = layout
        self.prefix_tokens = prefix_tokens
        self.grid_size = _layout.check_grid(grid_size)

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {}
        if self.layout is not None:
            opts["layout"] = self.layout
        if self.prefix_tokens is not None:
            opts["prefix_tokens"] = self.prefix_tokens
        if self.grid_size is not None:
            opts["grid_size"] = self.grid_size
        return opts

    def _check_layer(self, name: str, module: object, model: object = None) -> None:
        """Tokens of a timm model: its ``patch_embed.grid_size`` and ``num_prefix_tokens``
        fill in what was not given."""
        if self.layout != "tokens" or model is None:
            return
        grid = getattr(getattr(model, "patch_embed", None), "grid_size", None)
        if self.grid_size is None and grid is not None:
            self.grid_size = _layout.check_grid(tuple(grid))
        prefix = getattr(model, "num_prefix_tokens", None)
        if self.prefix_tokens is None and self.grid_size is not None:
            self.prefix_tokens = prefix if isinstance(prefix, int) else 0

    def _on_layout(self, x: torch.Tensor, fn: Callable[..., torch.Tensor]) -> torch.Tensor:
        """``fn(view, layout, prefix_tokens)`` on ``x``, through the token grid if one is
        known."""
        if self.layout != "tokens" or self.grid_size is None:
            return fn(x, self.layout, self.prefix_tokens)
        grid, restore = _layout.tokens_to_grid(x, self.grid_size, self.prefix_tokens or 0)
        return restore(fn(grid, "channels_last", None))


#: Module types whose output maps have a known number of spatial dims.
_MAP_RANK: tuple[tuple[tuple[type, ...], int], ...] = (
    ((nn.Conv1d, nn.ConvTranspose1d), 1),
    ((nn.Conv2d, nn.ConvTranspose2d, nn.BatchNorm2d, nn.MaxPool2d, nn.AvgPool2d), 2),
    ((nn.Conv3d, nn.ConvTranspose3d, nn.BatchNorm3d, nn.MaxPool3d, nn.AvgPool3d), 3),
)


class DropBlock(_Layout):
    """DropBlock (Ghiasi et al., 2018), exact: the expected dropped fraction is ``p``.

    Args:
        p: fraction of activations to drop, in ``[0, 1)``; a number or a schedule.
        block_size: block side (int) or one size per spatial dim; clipped to the map.
            Default: 7.
        shared_channels: one mask shared by all channels of a sample. Default: ``False``
            (independent per channel, as in the paper).
        layout: ``"channels_first"`` ``(B, C, *spatial)``, ``"channels_last"``
            ``(B, *spatial, C)``, ``"tokens"`` ``(B, N, C)`` (prefix tokens + a patch grid) or
            ``"sequence"`` ``(B, T, C)`` (no grid: blocks along ``T``). Default ``None``:
            channels-first, with an error if the shape looks like another layout.
        prefix_tokens: leading tokens left alone with ``layout="tokens"``. Default: from the
            model at attach (timm's ``num_prefix_tokens``), else inferred for a square grid
            after at most 2 tokens (otherwise an error). An error without ``layout="tokens"``.
        grid_size: ``(H, W)`` of the patch grid with ``layout="tokens"``. Default: from the
            model at attach (timm's ``patch_embed.grid_size``), else a square grid.
        rescale: ``"expected"`` (default), ``"count"`` or ``"none"``; see
            :func:`plugdrop.functional.drop_block`.

    Shape: 1D, 2D or 3D maps: ``(B, C, L)``, ``(B, C, H, W)``, ``(B, C, D, H, W)``, in the
    given layout. Output: same shape, dtype and memory format.

    Raises:
        SettingError: a bad ``p`` (or a schedule reaching one), ``block_size``, ``layout``,
            ``prefix_tokens`` or ``rescale``.
        ShapeError: at attach, a ``block_size`` tuple whose length is not the map rank of a
            selected conv, norm or pooling layer (otherwise at the first forward, naming the
            layer and the shape).
        TypeError: a setting of the wrong type; an integer or boolean input.
    """

    def __init__(self, p: ScheduleLike, block_size: int | tuple[int, ...] = 7, *,
                 shared_channels: bool = False, layout: str | None = None,
                 prefix_tokens: int | None = None, rescale: str = "expected",
                 grid_size: tuple[int, int] | None = None) -> None:
        super().__init__(layout, prefix_tokens, grid_size, p=(p, _checks.probability))
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

    def _check_layer(self, name: str, module: object, model: object = None) -> None:
        """A ``block_size`` tuple whose rank does not fit a conv / norm module's maps."""
        super()._check_layer(name, module, model)
        if not isinstance(self.block_size, tuple) or self.layout in ("tokens", "sequence"):
            return
        rank = next((r for types, r in _MAP_RANK if isinstance(module, types)), None)
        if rank is not None and rank != len(self.block_size):
            raise ShapeError(
                f"DropBlock's block_size {self.block_size} has {len(self.block_size)} entries "
                f"but layer {name!r} ({type(module).__name__}) produces {rank}-D maps: give "
                f"{rank} sizes, or an int")

    def _values(self, device: torch.device, layer: str | None = None
                ) -> dict[str, float | torch.Tensor]:
        # Under torch.compile on an accelerator the Triton kernel serves, ``p`` is a graph
        # input on the CPU: the kernel's op reads it on the host, without a synchronization.
        if torch.compiler.is_compiling() and kernel_ops.host_p(device):
            device = torch.device("cpu")
        return super()._values(device, layer)

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return self._on_layout(x, lambda v, layout, prefix: blockdrop.drop_block(
            v, p, self.block_size, self.shared_channels, layout, prefix, self.rescale))

    def _eager_at(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        if self.layout is None or self.layout == "channels_first":
            p = self._settings["p"].of(layer).value
            # a shape met before at this p: its plan, found in one lookup
            plan = blockdrop.plan_for(x, p, (self.block_size, self.shared_channels,
                                             self.rescale))
            if plan is not None:
                return plan(x)
            if x.is_floating_point():
                return blockdrop.drop_block(x, p, self.block_size, self.shared_channels,
                                            self.layout, self.prefix_tokens, self.rescale)
        return self._at(layer, x)


class Dropout2d(_Layout):
    """Drop whole channels per sample with probability ``p``; rescale by ``1 / (1 - p)``.

    Args:
        p: channel drop probability in ``[0, 1)``; a number or a schedule.
        layout, prefix_tokens: as in :class:`DropBlock`.

    Shape: ``(B, C, *spatial)`` with 0 to 3 spatial dims, or per ``layout``.

    Raises:
        SettingError: a bad ``p`` (or a schedule reaching one), ``layout`` or ``prefix_tokens``.
        ShapeError: at the forward, a tensor the layout does not fit (naming the layer).
        TypeError: an integer or boolean input.
    """

    def __init__(self, p: ScheduleLike, *, layout: str | None = None,
                 prefix_tokens: int | None = None,
                 grid_size: tuple[int, int] | None = None) -> None:
        super().__init__(layout, prefix_tokens, grid_size, p=(p, _checks.probability))

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        if self.layout != "tokens" or self.grid_size is None:
            return blockdrop.dropout2d(x, p, self.layout, self.prefix_tokens)
        return self._on_layout(x, lambda v, layout, prefix: blockdrop.dropout2d(v, p, layout,
                                                                                prefix))

    def _eager_at(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        y = blockdrop.dropout2d_cached(x, self._eager_value("p", layer), self.layout,
                                       self.prefix_tokens)
        if y is None:
            y = self._at(layer, x)  # checks the shape, raising on a bad one
            blockdrop.remember_map(x, self.layout)
        return y


class Dropout(ForwardTransform):
    """Elementwise dropout with probability ``p`` (rescaled by ``1 / (1 - p)``). Any shape.

    Args:
        p: drop probability in ``[0, 1)``; a number or a schedule.

    Raises:
        SettingError: a bad ``p`` (or a schedule reaching one).
        TypeError: an integer or boolean input.
    """

    def __init__(self, p: ScheduleLike) -> None:
        super().__init__(p=(p, _checks.probability))

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return masks.dropout(x, p)

    def _eager_at(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        if x.is_floating_point():
            return masks.dropout(x, self._eager_value("p", layer))
        return self._at(layer, x)


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
        TypeError: an integer or boolean input.
    """

    def __init__(self, p: ScheduleLike, num_heads: int) -> None:
        super().__init__(p=(p, _checks.probability))
        self.num_heads = _checks.count("num_heads", num_heads)

    def _options(self) -> dict[str, Any]:
        return {"num_heads": self.num_heads}

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return _impl.drop_head(x, p, self.num_heads)


class DropToken(ForwardTransform):
    """Drop whole tokens per sample with probability ``p``, rescaling the kept ones by
    ``1 / (1 - p)``; a token is the feature vector at one position.

    Attach it where a token sequence flows: a ViT's ``pos_drop`` or its ``blocks.*`` (timm's
    class and register tokens are read from the model and never dropped), an encoder's
    layers; or, with ``layout="channels_first"``, to conv maps, where it drops every channel
    of a position at once.

    Args:
        p: token drop probability in ``[0, 1)``; a number, a schedule or
            :func:`plugdrop.by_depth`.
        layout: ``"tokens"`` (default, ``(B, N, C)``), ``"channels_first"``
            (``(B, C, *spatial)``) or ``"channels_last"`` (``(B, *spatial, C)``).
        prefix_tokens: leading tokens kept with ``layout="tokens"``. Default: from the
            model at attach (timm's ``num_prefix_tokens``), else none.

    Shape: as ``layout`` says; output of the same shape, dtype and memory format.

    Raises:
        SettingError: a bad ``p``, ``layout`` or ``prefix_tokens``.
        ShapeError: at the forward, a tensor the layout does not fit (naming the layer).
        TypeError: an integer or boolean input.
    """

    def __init__(self, p: ScheduleLike, *, layout: str = "tokens",
                 prefix_tokens: int | None = None) -> None:
        super().__init__(p=(p, _checks.probability))
        _impl.check_token_layout(layout)
        _layout.check_prefix(prefix_tokens)
        if prefix_tokens is not None and layout != "tokens":
            raise SettingError(f"prefix_tokens describes token sequences: pass "
                               f"layout='tokens' with it (got layout={layout!r})")
        self.layout = layout
        self.prefix_tokens = prefix_tokens

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {} if self.layout == "tokens" else {"layout": self.layout}
        if self.prefix_tokens is not None:
            opts["prefix_tokens"] = self.prefix_tokens
        return opts

    def _check_layer(self, name: str, module: object, model: object = None) -> None:
        """The class and register tokens of a timm model, when not given."""
        prefix = getattr(model, "num_prefix_tokens", None)
        if self.layout == "tokens" and self.prefix_tokens is None and isinstance(prefix, int):
            self.prefix_tokens = prefix

    def apply(self, x: torch.Tensor, *, p: float | torch.Tensor) -> torch.Tensor:
        return _impl.drop_token(x, p, self.layout, self.prefix_tokens)

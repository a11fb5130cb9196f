"""The observer protocol: objects that look at a module's input or output (and its gradient)
through the attachment layer's hooks, in every mode, and never change them.
:mod:`plugdrop.observe` builds capture, trace, watch, Grad-CAM and layers on it."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

__all__ = ["Observer"]


class Observer:
    """Base of the observers :func:`observe` hangs on modules.

    Attributes:
        wants_grad: also call :meth:`on_grad` with the gradient of the observed tensor.
        strict: raise when a module's output holds no tensor; ``False`` (default) skips such
            modules silently.
        whole: hand the whole input/output structure (tuple, dict...) to :meth:`on_value`
            instead of locating one tensor for :meth:`on_forward`.
    """

    wants_grad = False
    strict = False
    whole = False

    def on_forward(self, layer: str, module: nn.Module, x: torch.Tensor) -> None:
        """Called with the observed tensor after ``module`` ran (``where="output"``) or before
        (``where="input"``)."""

    def on_value(self, layer: str, module: nn.Module, value: Any) -> None:
        """Called with the whole value when :attr:`whole` is set."""

    def on_grad(self, layer: str, grad: torch.Tensor) -> None:
        """Called with the gradient of the observed tensor during the backward."""

"""Module inputs and outputs that are not a bare tensor: find the tensor to act on in a tuple,
list, named tuple or dict, and put the result back in a copy of the same structure."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch

from ..errors import AttachError

#: What :func:`try_locate` returns when the value holds no tensor to act on.
MISSING = object()


def describe(value: Any) -> str:
    """``Tensor(1, 64, 8, 8)``, ``tuple[Tensor(...), NoneType]``, ``{'a': Tensor(...)}``..."""
    if isinstance(value, torch.Tensor):
        return f"Tensor{tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}[" + ", ".join(describe(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in value.items()) + "}"
    return type(value).__name__


def locate(value: Any, element: int | str | None, where: str) -> Any:
    """The key of the tensor to act on in ``value`` (``None`` for a bare tensor).

    Raises:
        AttachError: ``element`` does not name a tensor, or the structure holds none.
        TypeError: ``value`` is neither a tensor nor a tuple, list or dict.
    """
    if isinstance(value, torch.Tensor):
        if element is not None:
            raise AttachError(
                f"element={element!r} was given but the {where} is a single tensor; "
                f"leave element=None"
            )
        return None
    if isinstance(value, (tuple, list)):
        if element is None:
            for i, v in enumerate(value):
                if isinstance(v, torch.Tensor):
                    return i
        elif isinstance(element, int) and -len(value) <= element < len(value):
            if isinstance(value[element], torch.Tensor):
                return element
    elif isinstance(value, Mapping):
        if element is None:
            for k, v in value.items():
                if isinstance(v, torch.Tensor):
                    return k
        elif element in value and isinstance(value[element], torch.Tensor):
            return element
    else:
        raise TypeError(
            f"the {where} is a {type(value).__name__}, not a tensor, tuple, list or dict; "
            f"plugdrop transforms act on tensors"
        )
    which = "no tensor" if element is None else f"no tensor at element={element!r}"
    raise AttachError(
        f"the {where} {describe(value)} has {which}; pass element= with the index or key "
        f"of the tensor to act on"
    )


def try_locate(value: Any, element: int | str | None, where: str) -> Any:
    """:func:`locate`, or :data:`MISSING` where it would raise."""
    try:
        return locate(value, element, where)
    except (ValueError, TypeError):
        return MISSING


def replace(value: Any, key: Any, new: torch.Tensor) -> Any:
    """A copy of ``value`` with ``new`` at ``key`` (``new`` itself for a bare tensor)."""
    if key is None:
        return new
    if isinstance(value, tuple):
        items = list(value)
        items[key] = new
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    out = copy.copy(value)
    out[key] = new
    return out

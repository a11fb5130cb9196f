"""Validation of user-given values. Private.

Each check takes the setting's name and value and raises ``TypeError`` (wrong type) or
``SettingError`` (a ``ValueError``: bad value) with a message that names the setting, the value and the fix.
Checks are module-level functions so the objects that hold them pickle.
"""

from __future__ import annotations

import math
import numbers

import torch

from .errors import SettingError


def real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    return float(value)


def probability(name: str, value: object) -> float:
    value = real(name, value)
    if not 0.0 <= value < 1.0:
        raise SettingError(
            f"{name} must be a probability in [0, 1), got {value:g}; "
            f"p=1 would drop everything and leave nothing to rescale"
        )
    return value


def non_negative(name: str, value: object) -> float:
    value = real(name, value)
    if not (value >= 0.0 and math.isfinite(value)):
        raise SettingError(f"{name} must be a finite number >= 0, got {value:g}")
    return value


def positive(name: str, value: object) -> float:
    value = real(name, value)
    if not (value > 0.0 and math.isfinite(value)):
        raise SettingError(f"{name} must be a finite number > 0, got {value:g}")
    return value


def finite(name: str, value: object) -> float:
    value = real(name, value)
    if not math.isfinite(value):
        raise SettingError(f"{name} must be finite, got {value:g}")
    return value


def norm_order(name: str, value: object) -> float:
    """The p of a p-norm: a number > 0, ``math.inf`` included (the max norm)."""
    value = real(name, value)
    if not value > 0.0:
        raise SettingError(f"{name} must be > 0 (math.inf for the max norm), got {value:g}")
    return value


def unit(name: str, value: object) -> float:
    value = real(name, value)
    if not 0.0 <= value <= 1.0:
        raise SettingError(f"{name} must be in [0, 1], got {value:g}")
    return value


def count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise SettingError(f"{name} must be >= 1, got {value}")
    return int(value)


def flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value


def block_size(value: object, spatial: int | None = None) -> tuple[int, ...] | int:
    """An int >= 1, or a tuple of them (one per spatial dim)."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    if not items:
        raise SettingError("block_size must be an int >= 1 or a non-empty tuple of them")
    for v in items:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(
                f"block_size must be an int >= 1 or a tuple of ints, got {value!r}"
            )
        if v < 1:
            raise SettingError(f"block_size must be >= 1, got {value!r}")
    ints = tuple(int(v) for v in items)  # each checked to be an Integral above
    return ints if isinstance(value, (tuple, list)) else ints[0]


def tensor_or(name: str, value: object, check) -> float | torch.Tensor:
    """Numbers are checked, and so is a 0-dim tensor on the CPU (``torch.tensor(1.0)`` as
    ``p`` is refused as ``1.0`` is); one on an accelerator, or met while compiling, passes
    unchecked (reading it would synchronize, or break the graph)."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise SettingError(f"{name} must be a number or a 0-dim tensor, got shape "
                             f"{tuple(value.shape)}")
        if value.device.type == "cpu" and not torch.compiler.is_compiling():
            if value.dtype == torch.bool or value.is_complex():
                raise TypeError(f"{name} must be a real number, got a {value.dtype} tensor")
            check(name, float(value))  # on the host: reading it costs no synchronization
        return value
    return check(name, value)


def tensor(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def floating(what: str, x: torch.Tensor, kind: str = "tensors", fix: str | None = None,
             name: str | None = None) -> None:
    """Raise ``TypeError`` unless ``x`` is a floating-point (or complex) tensor: integer and
    boolean tensors cannot be dropped, rescaled or perturbed. ``what``: the function or
    transform; ``kind``: what it acts on; ``fix``: what to do instead (default: convert);
    ``name``: the argument, if ``what`` takes several."""
    if not (x.is_floating_point() or x.is_complex()):
        fix = fix or (f"convert it with {name or 'x'}.float() if its values are numbers (token "
                      f"ids and masks cannot be dropped, rescaled or perturbed)")
        raise TypeError(f"{what} acts on floating-point {kind}, got a {x.dtype} tensor of "
                        f"shape {tuple(x.shape)}{f' as {name}' if name else ''}; {fix}")


def float_tensor(what: str, name: str, value: object) -> torch.Tensor:
    """``value`` if it is a floating-point (or complex) tensor; ``TypeError`` naming ``what``,
    the argument, its type or dtype and shape, otherwise."""
    x = tensor(name, value)
    floating(what, x, name=name)
    return x

"""The transforms plugdrop offers, found from the package's exports: every list of transforms
(in messages, docstrings, the runner's config) is derived from here, never written by hand."""

from __future__ import annotations

from . import base

__all__ = ["catalog"]

_KINDS = {"forward": base.ForwardTransform, "gradient": base.GradientTransform,
          "coordinated": base.CoordinatedTransform, None: base.Transform}


def catalog(kind: str | None = None) -> dict[str, type[base.Transform]]:
    """Every transform class :mod:`plugdrop.transforms` exports, by name, in its order.

    Args:
        kind: ``"forward"`` (transforms of activations, the coordinated ones included),
            ``"gradient"``, ``"coordinated"`` (:class:`~plugdrop.ManifoldMixup`,
            :class:`~plugdrop.PatchUp`), or ``None`` (default): all of them.

    Returns:
        ``{"DropBlock": DropBlock, ...}``; the base classes (``Transform``,
        ``ForwardTransform``, ...) are not transforms one attaches and are left out.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of forward, gradient, coordinated or None, got "
                         f"{kind!r}")
    from .. import transforms as package

    bases = set(base.__all__)
    want = _KINDS[kind]
    return {name: cls for name in package.__all__ if name not in bases
            and isinstance(cls := getattr(package, name), type) and issubclass(cls, want)}


def names(kind: str | None = None) -> str:
    """The names of :func:`catalog` joined for a message: ``"ClipGradValue, ClipGradNorm"``."""
    return ", ".join(catalog(kind))

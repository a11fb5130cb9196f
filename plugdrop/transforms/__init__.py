"""Transforms: small objects holding the settings of a :mod:`plugdrop.functional` function.

- :mod:`.base`    ``Transform``, ``ForwardTransform``, ``GradientTransform``,
  ``CoordinatedTransform`` and scheduled settings
- :mod:`.drop`    ``DropBlock``, ``Dropout2d``, ``Dropout``, ``DropHead``, ``DropToken``
- :mod:`.droppath` ``DropPath`` (stochastic depth, ``skip_compute``)
- :mod:`.noise`   ``GaussianNoise``
- :mod:`.grad`    ``ClipGradValue``, ``ClipGradNorm``, ``ScaleGrad``, ``GradNoise``,
  ``ClipGradAdaptive``, ``CentralizeGrad``
- :mod:`.mixing`  ``ManifoldMixup``, ``PatchUp``

:func:`catalog` lists them by name and kind: every list of transforms elsewhere (messages,
docstrings, the runner's config) is derived from it, never written by hand.

A forward transform maps an activation to a regularized activation (``transform(x)``, as in
training); a gradient transform maps a gradient to a modified gradient (``transform(g)``) and
never changes forward values. :func:`plugdrop.attach` hangs them on a model's layers; they know
nothing about hooks.
"""

from .base import CoordinatedTransform, ForwardTransform, GradientTransform, Transform
from .drop import DropBlock, DropHead, Dropout, Dropout2d, DropToken
from .droppath import DropPath
from .grad import (
    CentralizeGrad,
    ClipGradAdaptive,
    ClipGradNorm,
    ClipGradValue,
    GradNoise,
    ScaleGrad,
)
from .mixing import ManifoldMixup, PatchUp
from .noise import GaussianNoise

__all__ = [
    "Transform",
    "ForwardTransform",
    "GradientTransform",
    "CoordinatedTransform",
    "DropBlock",
    "Dropout2d",
    "Dropout",
    "DropPath",
    "DropHead",
    "DropToken",
    "GaussianNoise",
    "ClipGradValue",
    "ClipGradNorm",
    "ScaleGrad",
    "GradNoise",
    "ClipGradAdaptive",
    "CentralizeGrad",
    "ManifoldMixup",
    "PatchUp",
]


_KINDS = {"forward": ForwardTransform, "gradient": GradientTransform,
          "coordinated": CoordinatedTransform, None: Transform}
_BASES = ("Transform", "ForwardTransform", "GradientTransform", "CoordinatedTransform")


def catalog(kind: str | None = None) -> dict[str, type[Transform]]:
    """Every transform class this package exports, by name, in the order of ``__all__``.

    Args:
        kind: ``"forward"`` (transforms of activations, the coordinated ones included),
            ``"gradient"``, ``"coordinated"`` (:class:`ManifoldMixup`, :class:`PatchUp`), or
            ``None`` (default): all of them.

    Returns:
        ``{"DropBlock": DropBlock, ...}``; the base classes (``Transform``,
        ``ForwardTransform``, ...) are not transforms one attaches and are left out.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of forward, gradient, coordinated or None, got "
                         f"{kind!r}")
    want = _KINDS[kind]
    namespace = globals()
    return {name: cls for name in __all__ if name not in _BASES
            and isinstance(cls := namespace[name], type) and issubclass(cls, want)}

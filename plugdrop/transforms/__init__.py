"""Transforms: small objects holding the settings of a :mod:`plugdrop.functional` function.

- :mod:`.base`    ``Transform``, ``ForwardTransform``, ``GradientTransform``,
  ``CoordinatedTransform`` and scheduled settings
- :mod:`.drop`    ``DropBlock``, ``Dropout2d``, ``Dropout``, ``DropPath``, ``DropHead``
- :mod:`.noise`   ``GaussianNoise``
- :mod:`.grad`    ``ClipGradValue``, ``ClipGradNorm``, ``ScaleGrad``, ``GradNoise``,
  ``ClipGradAdaptive``, ``CentralizeGrad``
- :mod:`.mixing`  ``ManifoldMixup``, ``PatchUp``
- :mod:`.registry` :func:`catalog`: every transform above by name and kind (each list of
  transforms elsewhere is derived from it)

A forward transform maps an activation to a regularized activation (``transform(x)``, as in
training); a gradient transform maps a gradient to a modified gradient (``transform(g)``) and
never changes forward values. :func:`plugdrop.attach` hangs them on a model's layers; they know
nothing about hooks.
"""

from .base import CoordinatedTransform, ForwardTransform, GradientTransform, Transform
from .drop import DropBlock, DropHead, Dropout, Dropout2d, DropPath
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
from .registry import catalog

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

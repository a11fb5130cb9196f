"""Transforms: small objects holding the settings of a :mod:`plugdrop.functional` function.

- :mod:`.base`    ``Transform``, ``ForwardTransform``, ``GradientTransform``,
  ``CoordinatedTransform`` and scheduled settings
- :mod:`.drop`    ``DropBlock``, ``Dropout2d``, ``Dropout``, ``DropPath``
- :mod:`.noise`   ``GaussianNoise``
- :mod:`.grad`    ``ClipGradValue``, ``ClipGradNorm``, ``ScaleGrad``, ``GradNoise``
- :mod:`.mixing`  ``ManifoldMixup``

A forward transform maps an activation to a regularized activation (``transform(x)``, as in
training); a gradient transform maps a gradient to a modified gradient (``transform(g)``) and
never changes forward values. :func:`plugdrop.attach` hangs them on a model's layers; they know
nothing about hooks.
"""

from .base import CoordinatedTransform, ForwardTransform, GradientTransform, Transform
from .drop import DropBlock, Dropout, Dropout2d, DropPath
from .grad import ClipGradNorm, ClipGradValue, GradNoise, ScaleGrad
from .mixing import ManifoldMixup
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
    "GaussianNoise",
    "ClipGradValue",
    "ClipGradNorm",
    "ScaleGrad",
    "GradNoise",
    "ManifoldMixup",
]

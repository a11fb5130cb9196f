"""Attachment: the only place that touches hooks. Private package; its API is re-exported by
:mod:`plugdrop` (``attach``, ``detach``, ``select``, ``summary``, ``handles``, ``Handle``,
``MixupHandle``) and used by :mod:`plugdrop.observe` (``observe``, ``Observer``).

- :mod:`.api`         the functions
- :mod:`.handle`      ``Handle``, ``MixupHandle``
- :mod:`.observer`    the observer protocol
- :mod:`._hooks`      the forward hook and pre-hook objects, activation-gradient hooks
- :mod:`._params`     ``where="params"``: parameter gradient hooks, FSDP2 shards
- :mod:`._structure`  tuple / dict inputs and outputs
- :mod:`._registry`   finding and removing plugdrop's hooks by type, compile invalidation

Three kinds of things hang on a model, and the hook classes say which: a per-layer transform
(:class:`~plugdrop.ForwardTransform`, :class:`~plugdrop.GradientTransform`), a coordinated
transform that decides once per forward (:class:`~plugdrop.transforms.CoordinatedTransform`,
with a begin hook on the root and a :class:`MixupHandle`), and an :class:`Observer`.
(The package is ``_attach`` rather than ``attach`` because ``plugdrop.attach`` is the function.)
"""

from ._structure import describe
from .api import (
    ObserverHandle,
    Summary,
    SummaryRow,
    attach,
    detach,
    forward_transforms,
    handles,
    observe,
    known_residual_branches,
    residual_branches,
    NotResidualWarning,
    select,
    summary,
)
from .handle import Handle, MixupHandle, NeverFiredWarning
from .observer import Observer

__all__ = ["attach", "detach", "handles", "select", "summary", "observe", "forward_transforms",
           "describe", "residual_branches", "known_residual_branches", "NotResidualWarning", "Handle", "MixupHandle", "NeverFiredWarning", "ObserverHandle", "Observer", "Summary",
           "SummaryRow"]

"""Attachment: the only place that touches hooks. Private package; its API is re-exported by
:mod:`plugdrop` (``attach``, ``detach``, ``select``, ``summary``, ``handles``, ``Handle``,
``MixupHandle``) and used by :mod:`plugdrop.observe` (``observe``, ``Observer``).

- :mod:`.api`         ``attach``, ``detach``, ``is_attached``, ``handles``
- :mod:`.selecting`   ``select``, ``residual_branches``, what a transform is told of its site
- :mod:`.summary`     ``summary``
- :mod:`.observing`   ``observe`` (for :mod:`plugdrop.observe`)
- :mod:`.handle`      ``Handle``, ``MixupHandle``, ``mixed_loss``
- :mod:`.steps`       ``after_optimizer_steps`` (the receipt's record of a training's steps)
- :mod:`.observer`    the observer protocol
- :mod:`._hooks`      the forward hook and pre-hook objects, activation-gradient hooks
- :mod:`._params`     ``where="params"``: parameter gradient hooks, FSDP2 shards
- :mod:`._structure`  tuple / dict inputs and outputs
- :mod:`._registry`   finding and removing plugdrop's hooks by type, compile invalidation
- :mod:`._residual`   finding residual branches (run or traced)

Three kinds of things hang on a model, and the hook classes say which: a per-layer transform
(:class:`~plugdrop.ForwardTransform`, :class:`~plugdrop.GradientTransform`), a coordinated
transform that decides once per forward (:class:`~plugdrop.transforms.CoordinatedTransform`,
with a begin hook on the root and a :class:`MixupHandle`), and an :class:`Observer`.
(The package is ``_attach`` rather than ``attach`` because ``plugdrop.attach`` is the function.)
"""

from ..errors import NotResidualWarning
from ._structure import describe
from .api import attach, detach, handles, is_attached
from .handle import Handle, MixupHandle, NeverFiredWarning, mixed_loss
from .observer import Observer
from .observing import ObserverHandle, forward_transforms, observe
from .selecting import known_residual_branches, residual_branches, select
from .steps import after_optimizer_steps
from .summary import Summary, SummaryRow, summary

__all__ = ["attach", "detach", "handles", "is_attached", "select", "summary", "observe",
           "forward_transforms", "describe", "residual_branches", "known_residual_branches",
           "NotResidualWarning", "Handle", "MixupHandle", "NeverFiredWarning", "mixed_loss",
           "ObserverHandle", "Observer", "Summary", "SummaryRow", "after_optimizer_steps"]

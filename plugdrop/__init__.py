"""plugdrop: retrofit regularization onto any PyTorch model, without touching its code.

    >>> import plugdrop as pd
    >>> h = pd.attach(model, "layer3.*", pd.DropBlock(pd.linear(0.0, 0.1, steps=5000),
    ...                                                block_size=7))
    >>> h.bind(optimizer)   # the schedule advances on every optimizer step
    >>> h.remove()          # the model is exactly as it was

Attachments written as data (the entries of a ``plugdrop ablate`` variant, a YAML file or text)
attach as one group with :func:`attach_all`. A training script of your own that ``plugdrop
ablate`` runs (``program:``) finds its run, attaches its variant and logs its metrics with
:func:`current_run`.

The public API is what ``__all__`` lists; modules whose names start with ``_`` are private.
"""

from . import errors, functional, observe, schedules, transforms
from ._attach import (
    Handle,
    MixupHandle,
    NeverFiredWarning,
    Summary,
    SummaryRow,
    attach,
    detach,
    handles,
    is_attached,
    mixed_loss,
    NotResidualWarning,
    residual_branches,
    select,
    summary,
)
from .errors import (AttachError, PlugdropError, SelectorError, SettingError, ShapeError,
                     SpecError)
from .observe import (
    LayerRow,
    LayerTable,
    Trace,
    Watch,
    capture,
    gradcam,
    layers,
    save_gradcam,
    trace,
    watch,
)
from .schedules import LayerValue, Schedule, by_depth, cosine, linear, piecewise, warmup
from . import spec
from .spec import AttachmentGroup, AttachmentSpec, attach_all, parse_spec
from . import run
from .run import AblationRun, current_run
from .transforms import *  # noqa: F403  (every transform: a new one is exported here at once)

__version__ = "0.1.0"

__all__ = [
    "attach",
    "attach_all",
    "parse_spec",
    "current_run",
    "AblationRun",
    "AttachmentGroup",
    "AttachmentSpec",
    "detach",
    "handles",
    "is_attached",
    "mixed_loss",
    "residual_branches",
    "select",
    "summary",
    "Handle",
    "MixupHandle",
    "NeverFiredWarning",
    "Summary",
    "SummaryRow",
    "Schedule",
    "linear",
    "cosine",
    "piecewise",
    "warmup",
    "by_depth",
    "LayerValue",
    "errors",
    "functional",
    "observe",
    "schedules",
    "spec",
    "transforms",
    "__version__",
]
__all__ += transforms.__all__  # Transform, DropBlock, ... ManifoldMixup
__all__ += observe.__all__  # capture, trace, watch, gradcam, save_gradcam, layers, ...
__all__ += errors.__all__  # PlugdropError, SettingError, ShapeError, SelectorError, AttachError

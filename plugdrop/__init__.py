"""plugdrop: retrofit regularization onto any PyTorch model, without touching its code.

    >>> import plugdrop as pd
    >>> h = pd.attach(model, "layer3.*", pd.DropBlock(pd.linear(0.0, 0.1, steps=5000),
    ...                                                block_size=7))
    >>> h.bind(optimizer)   # the schedule advances on every optimizer step
    >>> h.remove()          # the model is exactly as it was
"""

from . import functional, observe, schedules
from ._attach import (
    Handle,
    MixupHandle,
    Summary,
    SummaryRow,
    attach,
    detach,
    handles,
    select,
    summary,
)
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
from .schedules import Schedule, cosine, linear, piecewise, warmup
from .transforms import (
    ClipGradNorm,
    ClipGradValue,
    DropBlock,
    Dropout,
    Dropout2d,
    DropPath,
    ForwardTransform,
    GaussianNoise,
    GradientTransform,
    GradNoise,
    ManifoldMixup,
    ScaleGrad,
    Transform,
)

__version__ = "0.1.0"

__all__ = [
    "attach",
    "detach",
    "handles",
    "select",
    "summary",
    "Handle",
    "MixupHandle",
    "Summary",
    "SummaryRow",
    "Transform",
    "ForwardTransform",
    "GradientTransform",
    "DropBlock",
    "Dropout2d",
    "Dropout",
    "DropPath",
    "GaussianNoise",
    "ManifoldMixup",
    "ClipGradValue",
    "ClipGradNorm",
    "ScaleGrad",
    "GradNoise",
    "Schedule",
    "linear",
    "cosine",
    "piecewise",
    "warmup",
    "capture",
    "trace",
    "watch",
    "gradcam",
    "save_gradcam",
    "layers",
    "LayerTable",
    "LayerRow",
    "Trace",
    "Watch",
    "functional",
    "observe",
    "schedules",
    "__version__",
]

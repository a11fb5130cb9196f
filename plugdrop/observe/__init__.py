"""Look inside a model through the same hooks that regularize it.

- :mod:`.capture`  ``capture``: intermediate tensors (or their gradients) by layer
- :mod:`.trace`    ``trace``: forward and backward passes, in order
- :mod:`.watch`    ``watch``: running statistics, measured drop fraction
- :mod:`.gradcam`  ``gradcam``, ``save_gradcam``: Grad-CAM heatmaps and overlays
- :mod:`.layers`   ``layers``: the module tree with outputs from a dry forward

Everything here attaches through the attachment layer's observer API (so
:func:`plugdrop.summary` lists it and :func:`plugdrop.detach` removes it) and leaves nothing
behind when its block or handle ends. Observers never change a value or a gradient.
"""

from .capture import capture
from .gradcam import gradcam, save_gradcam
from .layers import LayerRow, LayerTable, layers
from .trace import Trace, trace
from .watch import Watch, watch

__all__ = ["capture", "trace", "watch", "gradcam", "save_gradcam", "layers", "Trace", "Watch",
           "LayerTable", "LayerRow"]

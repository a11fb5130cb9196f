"""Whether Triton is here, and whether it interprets. Private.

The kernels' modules import Triton at their top; this module does not, so that asking costs
nothing where no tensor needs the kernels.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from ..._compat import constant_result

__all__ = ["available", "interpreted", "triton_module"]


@functools.lru_cache(maxsize=1)
def triton_module() -> Any:
    if os.environ.get("PLUGDROP_NO_TRITON", "") not in ("", "0"):
        return None
    try:
        import triton
        import triton.language  # noqa: F401
    except Exception:  # not installed, or a build that cannot load here
        return None
    return triton


@constant_result
def available() -> bool:
    """Whether Triton can be imported (``PLUGDROP_NO_TRITON=1`` says no)."""
    return triton_module() is not None


_INTERPRETED: list[bool] = []


@constant_result
def interpreted() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET=1`` when this
    process first asked)."""
    if not _INTERPRETED:
        triton = triton_module()
        knobs = getattr(triton, "knobs", None)  # Triton 3.3 on; before, the variable alone
        if knobs is not None:
            on = bool(knobs.runtime.interpret)
        else:
            on = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
        _INTERPRETED.append(triton is not None and on)
    return _INTERPRETED[0]

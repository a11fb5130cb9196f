"""One attachment of a variant, read by the library's parser (:mod:`plugdrop.spec`, the one
:func:`plugdrop.attach_all` uses) with its errors as the runner's :class:`ConfigError`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plugdrop as pd

from .locations import Loc, config_errors

__all__ = ["ATTACH_KEYS", "Attachment", "check_together", "parse_attachment"]

#: the keys of an attachment that are not settings of its transform
ATTACH_KEYS = pd.spec.ATTACH_KEYS

#: one checked attachment (layers, transform, settings, ``exclude``/``where``/``element``)
Attachment = pd.AttachmentSpec


def parse_attachment(raw: Any, loc: Loc | None, variant: str) -> Attachment:
    """Check one attachment mapping of variant ``variant`` and build it once (so that bad
    settings fail here, at their place in the file)."""
    with config_errors():
        return pd.spec.parse_attachment(raw, loc, f"variant {variant!r}")


def check_together(variant: str, atts: Sequence[Attachment]) -> None:
    """What only a whole variant shows (see :func:`plugdrop.spec.check_together`)."""
    with config_errors():
        pd.spec.check_together(atts, f"variant {variant!r}")

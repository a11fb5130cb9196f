"""The values of an attachment's settings, numbers or schedules by name: the library's
(:mod:`plugdrop.spec`), so that a config and :func:`plugdrop.attach_all` read them alike."""

from __future__ import annotations

import plugdrop as pd

__all__ = ["build_value", "schedule_names", "transform_names"]

build_value = pd.spec.build_value
schedule_names = pd.spec.schedule_names
transform_names = pd.spec.transform_names

"""Attachments written as data: the list a ``plugdrop ablate`` variant holds, a YAML file or
text, or Python mappings, checked with the place of every mistake and attached as one group.

    >>> group = pd.attach_all(model, "regularize.yaml", steps=len(loader) * epochs)
    >>> group.bind(optimizer)                        # every schedule steps with the optimizer
    >>> torch.save({"plugdrop": group.state_dict(), ...}, path)   # resume the ramp later
    >>> group.remove()                               # the model is exactly as it was

An attachment is a mapping: ``layers`` (a selector), ``transform`` (a class name of
:mod:`plugdrop.transforms`), the transform's settings (numbers, or schedules written
``{schedule: linear, start: 0, end: 0.1, steps: 5000}``; ``by_depth``, ``cosine``, ``piecewise``,
``warmup`` too, and ``times:`` to multiply two), and optionally ``exclude``, ``where``,
``element`` as :func:`plugdrop.attach` takes them.

The YAML reader (:func:`read_text`, :func:`read_yaml`, :class:`LocDict`, :class:`LocList`) is
public so that tools reading larger files (the ablation runner) give the same
``file:line:column`` messages and read files in the same encodings.
"""

from ._values import build_value, check_schedule, schedule_names, transform_names
from ._yaml import Loc, LocDict, LocList, loc_of, plain, read_text, read_yaml, suggest
from .attachment import ATTACH_KEYS, AttachmentSpec, check_together, parse_attachment
from .group import AttachmentGroup, SpecLike, attach_all, parse_spec

__all__ = ["ATTACH_KEYS", "AttachmentGroup", "AttachmentSpec", "Loc", "LocDict", "LocList",
           "SpecLike", "attach_all", "build_value", "check_schedule", "check_together",
           "loc_of", "parse_attachment", "parse_spec", "plain", "read_text", "read_yaml",
           "schedule_names",
           "suggest", "transform_names"]

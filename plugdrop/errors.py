"""The exceptions plugdrop raises for mistakes a user can make.

Every one derives from :class:`PlugdropError`, itself a ``ValueError``, so ``except ValueError``
keeps working; wrong *types* of arguments raise the built-in ``TypeError``. Messages name the
layer, the shape or the setting, and say how to fix it, on one line: :func:`one_line` writes
any message so (the command line and the ablation runner use it for every message they print;
it is not re-exported by ``import plugdrop``).
"""

from __future__ import annotations

__all__ = ["PlugdropError", "SettingError", "ShapeError", "SelectorError", "AttachError",
           "SpecError", "NotResidualWarning"]


def one_line(message: BaseException | str, *, typed: bool = False, period: bool = True,
             limit: int | None = None) -> str:
    """A message on one line, as plugdrop's errors and the command line print them: every run
    of whitespace (newlines included) becomes one space.

    Args:
        message: an exception (its ``str``; its type's name when it has no message) or text.
        typed: write an exception as ``Type: message``.
        period: keep a final period (``False``: drop it, for a message that goes on in a
            longer sentence).
        limit: cut the line after about this many characters, marked `` ...``.

    >>> one_line(ValueError("bad\n  value"), typed=True)
    'ValueError: bad value'
    """
    text = " ".join(str(message).split())
    if isinstance(message, BaseException):
        name = type(message).__name__
        text = f"{name}: {text}" if typed and text else (text or name)
    if not period:
        text = text.rstrip(".")
    if limit is not None and len(text) > limit:
        text = text[:limit].rstrip() + " ..."
    return text


class PlugdropError(ValueError):
    """Base of plugdrop's errors: a bad value given by the user."""


class SettingError(PlugdropError):
    """A transform setting or schedule has a bad value (``p`` outside ``[0, 1)``, a negative
    ``std``, a schedule that reaches an invalid value at some step)."""


class ShapeError(PlugdropError):
    """A tensor's rank or shape does not fit the transform or its ``layout``; the message
    gives the shape and the layout to pass."""


class SelectorError(PlugdropError):
    """A selector matches no module (the message lists the closest names), or is malformed."""


class AttachError(PlugdropError):
    """:func:`plugdrop.attach` got arguments that cannot work together (``where``, ``element``,
    a transform already attached, ``where="params"`` on a module without parameters)."""


class SpecError(PlugdropError):
    """An attachment spec (:func:`plugdrop.attach_all`: a list of mappings, a YAML file or
    string) is malformed: not YAML, an unknown transform, schedule or setting, a bad value. The
    message starts with the place: ``file:line:column`` for YAML, ``spec[i].key`` for Python
    data."""


class NotResidualWarning(UserWarning):
    """DropPath attached to a module that is not a residual branch: it then drops the whole
    sample's features instead of skipping a block."""

"""A run's receipt (``attached.json``: what its program attached, written by the program's
process), checked as the metrics lines are: nothing a program writes is taken at its word.

A receipt is a JSON object that may name its run's variant (``variant``) and its run
(``run``; plugdrop's own receipts name both: a receipt naming another is refused), and either says why nothing was attached (``error``: a
string) or lists its attachments: each an object with a ``label`` (a string), its ``layers``
(a list of strings) and ``calls`` (how often its hooks ran: a whole number >= 0, finite).

    >>> check({"variant": "a", "run": "a__s0", "attachments": [
    ...     {"label": "DropBlock@layer3.*", "layers": ["layer3.0"], "calls": 18}]}, "a__s0", "a")
    >>> check({"variant": "a", "attachments": [{"label": "x", "layers": [], "calls": -1}]},
    ...       "a__s0", "a")
    "its attachment 1 ('x') says its hooks ran -1 times (a whole number >= 0)"
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["calls", "check"]


def _short(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _count(value: Any) -> bool:
    """Whether ``value`` is a count of hook runs: a whole number >= 0 (``3.0`` too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return False
    return value >= 0


def check(receipt: Any, run_id: str | None, variant: str) -> str | None:
    """Why ``receipt`` (``attached.json`` as read) is not a receipt of run ``run_id`` (``None``:
    any run) of ``variant``, in a few words, or ``None`` when it is one (an ``error`` receipt
    included)."""
    if not isinstance(receipt, dict):
        return f"it is not a JSON object but {_short(receipt)}"
    if receipt.get("variant") is not None and receipt["variant"] != variant:
        return (f"it is the receipt of variant {_short(receipt.get('variant'))}, not of "
                f"{variant!r} (a file left by another run?)")
    if run_id is not None and receipt.get("run") is not None and receipt["run"] != run_id:
        return (f"it is the receipt of run {_short(receipt.get('run'))}, not of {run_id!r} "
                f"(a file left by another run?)")
    if "error" in receipt:
        return None if isinstance(receipt["error"], str) else \
            f"its error is {_short(receipt['error'])}, not a line of text"
    items = receipt.get("attachments")
    if not isinstance(items, list):
        return f"its attachments are {_short(items)}, not a list"
    for i, a in enumerate(items, 1):
        if not isinstance(a, dict) or not isinstance(a.get("label"), str):
            return f"its attachment {i} is {_short(a)}, not an object with a label"
        layers = a.get("layers", [])
        if not isinstance(layers, list) or not all(isinstance(x, str) for x in layers):
            return f"its attachment {i} ({a['label']!r}) lists layers {_short(layers)}"
        if not _count(a.get("calls", 0)):
            return (f"its attachment {i} ({a['label']!r}) says its hooks ran "
                    f"{_short(a.get('calls'))} times (a whole number >= 0)")
    return None


def calls(receipt: dict[str, Any]) -> int:
    """How often the hooks of a receipt that passed :func:`check` ran, over its
    attachments."""
    return sum(int(a.get("calls", 0)) for a in receipt.get("attachments") or [])

"""The metrics a program logs (``metrics.jsonl`` of its run, the run contract's
``PLUGDROP_METRICS``), read back as data: one JSON object per line, each with ``epoch`` or
``step`` (a whole number >= 0) and the metric values, numbers (``NaN`` and ``Infinity`` as
Python's ``json`` writes them).

A line that is not such an object is skipped (the last one silently: a program killed while
writing it). Lines of one position (the same ``epoch`` and ``step``) are merged, the later
values winning, at the place of the later line: a program resumed from an earlier checkpoint
logs those evaluations again, and its new values count. A run's value of a metric is the last
one it logged (:func:`last_value`).

    >>> recs = parse_records(['{"epoch": 1, "miou": 0.5}', '{"epoch": 2, "miou": 0.6}'])[0]
    >>> last_value(recs, "miou")
    (0.6, {'epoch': 2, 'miou': 0.6})
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["MOST_KEPT", "POSITION", "finite", "thinned", "logged_names", "last_value", "merge_records", "number",
           "parse_records",
           "position", "read_records"]

#: the keys that say where in the training a line was logged
POSITION = ("epoch", "step")


def number(value: Any) -> float | None:
    """``value`` as a float when it is a JSON number (not a bool), else ``None``; an integer
    too large for a float is an infinity of its sign (as JSON's ``1e400`` reads)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def position(record: Mapping[str, Any]) -> tuple[int | None, int | None] | None:
    """``(epoch, step)`` of a record (either may be ``None``), or ``None`` when it has neither
    or one that is not a whole number >= 0."""
    pos = []
    for key in POSITION:
        v = record.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            return None
        pos.append(v)
    return None if pos == [None, None] else (pos[0], pos[1])


def parse_records(lines: Sequence[str], where: str = "metrics.jsonl"
                  ) -> tuple[list[dict[str, Any]], list[str]]:
    """The records of ``lines`` (merged by position, see the module) and one warning per
    line skipped before the last one."""
    merged: dict[tuple[int | None, int | None], dict[str, Any]] = {}
    warnings = []
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    try:  # every line whole: one parse of them all (a program that logs each step)
        parsed: list[Any] | None = json.loads("[" + ",".join(x for _, x in numbered) + "]")
    except ValueError:
        parsed = None
    if parsed is not None and len(parsed) != len(numbered):
        parsed = None  # a line holding two values ("1, 2"): read line by line
    for k, (lineno, line) in enumerate(numbered):
        if parsed is not None:
            rec = parsed[k]
        else:
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
        pos = position(rec) if isinstance(rec, dict) else None
        if pos is None or rec is None:
            if k < len(numbered) - 1:
                warnings.append(f"{where}: line {lineno} is not a metrics record (a JSON object "
                                f"with epoch or step, a whole number); skipped")
            continue
        earlier = merged.pop(pos, {})
        merged[pos] = {**earlier, **rec}
    return list(merged.values()), warnings


def merge_records(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``records`` merged by position (see the module): one record per ``(epoch, step)``, the
    later values winning, at the place of the later record; a record without a valid
    position is left out."""
    merged: dict[tuple[int | None, int | None], dict[str, Any]] = {}
    for rec in records:
        pos = position(rec)
        if pos is not None:
            merged[pos] = {**merged.pop(pos, {}), **rec}
    return list(merged.values())


def read_records(path: Path, warnings: list[str] | None = None,
                 sealed: int | None = None) -> list[dict[str, Any]]:
    """The records of the file ``path`` (none when it is missing); warnings about skipped
    lines and an unreadable file are appended to ``warnings``. ``sealed``: the file's size
    when its run was recorded finished; what was appended later is ignored, and said."""
    try:
        raw = path.read_bytes()
        if sealed is not None and len(raw) > sealed:
            if warnings is not None:
                warnings.append(f"{path}: {len(raw) - sealed} bytes were appended after its "
                                f"run was recorded finished (a process the program left "
                                f"behind?); ignored: the run's values are those it finished "
                                f"with")
            raw = raw[:sealed]
    except FileNotFoundError:
        return []
    except OSError as e:
        if warnings is not None:
            warnings.append(f"{path}: unreadable ({e.strerror or e}); its records are left out")
        return []
    records, skipped = parse_records(raw.decode("utf-8", errors="replace").splitlines(),
                                     str(path))
    if warnings is not None:
        warnings += skipped
    return records


def logged_names(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The metrics the records hold (keys with a number, ``epoch`` and ``step`` left out), in
    the order first met."""
    out: dict[str, None] = {}
    for rec in records:
        for key, value in rec.items():
            if key not in POSITION and number(value) is not None:
                out.setdefault(str(key), None)
    return list(out)


def last_value(records: Sequence[Mapping[str, Any]], name: str
               ) -> tuple[float | None, Mapping[str, Any] | None]:
    """The last value of metric ``name`` the records hold (NaN and infinities included) and
    its record; ``(None, None)`` when none holds it."""
    for rec in reversed(records):
        value = number(rec.get(name))
        if value is not None:
            return value, rec
    return None, None


#: records of one run that the report's files and curves keep at most (evenly spaced, the last
#: included); the run's ``metrics.jsonl`` keeps every one
MOST_KEPT = 2000


def thinned(records: Sequence[Mapping[str, Any]], most: int = MOST_KEPT
            ) -> Sequence[Mapping[str, Any]]:
    """``records`` when there are at most ``most``, else ``most`` of them evenly spaced, the
    first and the last included (a program that logs each of 400,000 steps)."""
    n = len(records)
    if n <= most:
        return records
    return [records[round(i * (n - 1) / (most - 1))] for i in range(most)]


def finite(value: float | None) -> bool:
    """Whether ``value`` is a finite number."""
    return value is not None and math.isfinite(value)

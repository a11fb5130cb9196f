"""The one plain-text table formatter behind ``summary``, ``trace``, ``watch`` and ``layers``.
Private."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(header: Sequence[str] | None, rows: Sequence[Sequence[object]], *,
                 rule: bool = False, sep: str = "  ") -> str:
    """Left-aligned columns as wide as their widest cell; trailing blanks stripped.

    Args:
        header: column titles, or ``None`` for none.
        rows: the cells (anything ``str()`` can print).
        rule: a line of dashes under the header.
        sep: between columns.
    """
    lines = [[str(c) for c in row] for row in rows]
    if header is not None:
        head = [str(c) for c in header]
        lines = [head, *([["-" * len(h) for h in head]] if rule else []), *lines]
    if not lines:
        return ""
    width = [max(len(r[i]) for r in lines if i < len(r)) for i in range(max(map(len, lines)))]
    if header is not None and rule:
        lines[1] = ["-" * w for w in width]
    return "\n".join(sep.join(c.ljust(w) for c, w in zip(r, width)).rstrip() for r in lines)

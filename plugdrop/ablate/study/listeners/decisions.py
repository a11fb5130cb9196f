"""``OUT/decisions.jsonl``: the decisions an adaptive design took, one JSON line each (its
round, seeds, variant, verdict, interval and reason), rewritten whole when they change; first,
one line ``{"judging_changed": ...}`` per change of the settings that judge made after runs
had ended (``ablation.json``'s ``judging_changes``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ... import runs
from ..listener import Listener, StudyInfo

__all__ = ["DECISIONS", "DecisionsFile"]

#: the file's name in the study's folder
DECISIONS = "decisions.jsonl"


class DecisionsFile(Listener):
    """Keeps ``decisions.jsonl`` equal to the decisions taken so far."""

    def __init__(self) -> None:
        self.written: bytes | None = None
        self.changes: list[dict[str, Any]] = []

    def on_study_start(self, study: StudyInfo) -> None:
        """The changes of the judging settings the folder records come first in the file."""
        if not study.main:
            return
        try:
            doc = json.loads((study.runs_in / "ablation.json").read_text())
        except (OSError, ValueError):
            doc = {}
        got = doc.get("judging_changes") if isinstance(doc, dict) else None
        self.changes = [{"judging_changed": c} for c in got or [] if isinstance(c, dict)]
        if self.changes:
            self.on_decision(study, [])

    def on_decision(self, study: StudyInfo, decisions: Sequence[dict[str, Any]]) -> None:
        if not study.main:
            return
        data = "".join(json.dumps(e) + "\n" for e in [*self.changes, *decisions]).encode()
        if data != self.written:
            runs.atomic_write_bytes(study.runs_in / DECISIONS, data, "the decisions")
            self.written = data

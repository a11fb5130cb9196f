"""``OUT/decisions.jsonl``: the decisions an adaptive design took, one JSON line each (its
round, seeds, variant, verdict, interval and reason), rewritten whole when they change."""

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

    def on_decision(self, study: StudyInfo, decisions: Sequence[dict[str, Any]]) -> None:
        if not study.main:
            return
        data = "".join(json.dumps(e) + "\n" for e in decisions).encode()
        if data != self.written:
            runs.atomic_write_bytes(study.runs_in / DECISIONS, data, "the decisions")
            self.written = data

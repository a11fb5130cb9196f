"""How a program's run ended, judged: ``done.json`` when the program exited with status 0,
logged a finite value of the decision metric and, for a variant with attachments, left its
receipt (``attached.json``: its hooks ran); else ``failed.json`` and :class:`RunFailed` with
one line saying why: the exception a Python program died of (its type and message first, a
position in the variant's spec shown as the place in the user's config), its exit status and
the end of its stderr, the signal that killed it, ``run_timeout``, the metric it did not log
(naming those it did), a value that diverged, a variant it did not attach.

A failure of judging only (the program exited with status 0, but the metric is missing or
the variant's receipt is) is recorded as such (``"judged": true`` in ``failed.json``, with the
judging settings it was judged under): the training is complete, and a resumed ablation whose
judging settings changed (a corrected ``decide_on``) judges the run again without training it;
under the same settings it trains it again (the program had to change).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import runs
from ..config import AblationConfig, judging
from ..config.locations import suggest
from ..errors import one_line
from ..results import not_regular, receipts
from ..runs.records import POSITION, finite
from . import contract, process
from .protocol import RunFailed

__all__ = ["JUDGED", "Judge", "exception_of", "receipt_problem"]

#: ``failed.json``'s key for a failure of judging only (the training completed)
JUDGED = "judged"
#: how many of the last lines of its stderr a failed program's one line quotes
QUOTED_LINES = 3
#: at most so many characters of them
QUOTED_CHARS = 240
#: a Python exception's line: ``ModuleNotFoundError: No module named 'torch'``,
#: ``plugdrop.errors.SelectorError: ...``, ``KeyboardInterrupt``
_EXCEPTION = re.compile(r"([A-Za-z_][\w.]*\.)?[A-Z]\w*(Error|Exception|Interrupt|Exit|Warning|"
                        r"Failure|Fault)\b(: .*)?")


def exception_of(stderr: Sequence[str]) -> str | None:
    """The exception line of the last Python traceback in ``stderr`` (its lines), or
    ``None``: the first line after ``Traceback (most recent call last):`` that is not a
    frame of it."""
    starts = [i for i, line in enumerate(stderr)
              if line.startswith("Traceback (most recent call last)")]
    if not starts:
        return None
    for line in stderr[starts[-1] + 1:]:
        if line[:1].isspace() or not line.strip():
            continue
        if _EXCEPTION.fullmatch(line.strip()):
            return line.strip()
        return line.strip() if ":" in line else None
    return None


def _quoted(lines: Sequence[str], cause: str | None) -> str:
    """A program's stderr on one line: the exception first (when there is one), then its
    last lines, cut to :data:`QUOTED_CHARS`."""
    tail = [line for line in lines[-QUOTED_LINES:] if line.strip() != cause]
    text = " | ".join(" ".join(line.split()) for line in tail)
    if len(text) > QUOTED_CHARS:
        text = "..." + text[-QUOTED_CHARS:]
    if cause is None:
        return f"; its stderr ends: {text}" if text else "; its stderr is empty"
    return f": {cause}" + (f" (its stderr ends: {text})" if text else "")


def _where(rec: Mapping[str, Any]) -> str:
    """``epoch 1`` or ``step 300`` (or both) of a record."""
    return ", ".join(f"{k} {rec[k]}" for k in POSITION if k in rec) or "a record"


def _exit_note(code: int) -> str:
    """What an exit status above 128 usually means (a shell's child killed by a signal)."""
    if code > 128:
        name = process.signal_name(code - 128)
        if not name.startswith("signal "):
            return f" (128 + {name}: a process it ran was killed by that signal?)"
    return ""


def receipt_problem(receipt: Any, variant: str, run_id: str | None = None) -> str | None:
    """Why the receipt of a run of ``variant`` (``attached.json`` as read, ``None`` when
    missing; ``run_id``: the run's, which a receipt of this version names) does not show the
    variant attached and running, or ``None``. The receipt is checked as metrics lines are
    (:func:`~plugdrop.ablate.results.receipts.check`): one of another run, or with counts that
    are not whole numbers >= 0, is said so."""
    if receipt is None:
        return (f"the program finished without attaching variant {variant!r} (no receipt, "
                f"attached.json): call plugdrop.current_run().attach(model), use the "
                f"callbacks, or set attach_to: (a model factory the script calls, such as "
                f"timm.create_model); receipt: false when the program applies the spec by "
                f"other means")
    if isinstance(receipt, str):
        return f"its receipt (attached.json) is {receipt}"
    wrong = receipts.check(receipt, run_id, variant)
    if wrong is not None or not isinstance(receipt, dict):
        return f"its receipt (attached.json) is not to be trusted: {wrong}"
    if isinstance(receipt.get("error"), str):
        return f"variant {variant!r} was not attached: {receipt['error']}"
    items = receipt.get("attachments")
    if not isinstance(items, list) or not items:
        return (f"variant {variant!r} was not attached: its receipt (attached.json) lists no "
                f"attachment")
    if receipts.calls(receipt) == 0:
        said = ", ".join(f"{a.get('label')} on {len(a.get('layers') or [])} layers"
                         for a in items if isinstance(a, dict))
        return (f"variant {variant!r} was attached ({said}) but its hooks never ran in "
                f"training: the model that trains is not the one attached (a copy, a second "
                f"model), or it never trained in train mode")
    return None


class Judge:
    """Judges the runs of one config's program (see the module).

    Args:
        cfg: the config (its decision metric, ``receipt``, the variants' places).
    """

    def __init__(self, cfg: AblationConfig) -> None:
        self.cfg = cfg

    def judge(self, rd: runs.RunDir, attempt: int, ending: process.Ending | None,
              out_log: Path, err_log: Path, source: str | None = None) -> None:
        """``done.json`` or :class:`RunFailed` (and ``failed.json``) for the attempt that
        ended as ``ending`` (``None``: an attempt judged before, judged again, which keeps
        the wall time it was judged with); ``source``: why ``metrics_from`` gave no record
        (its real cause, with the run's path), said when the metric is missing."""
        cfg = self.cfg
        stderr = process.tail(err_log, lines=200)
        cause = self.located(exception_of(stderr), rd.variant)
        quoted = _quoted(stderr, cause)

        def fail(line: str, reason: str | None = None) -> RunFailed:
            return self.fail(rd, line, ending, out_log, err_log, stderr[-20:], attempt, reason)

        if ending is not None and ending.timed_out:
            raise fail(f"the program ran longer than run_timeout {cfg.run_timeout} and was "
                       f"ended (SIGTERM, then SIGKILL after {process.GRACE_S:g}s)")
        if ending is not None and ending.killed_by is not None:
            hint = (" (sent by the kernel's out-of-memory killer, `kill -9` or a scheduler "
                    "ending the job: dmesg says whether it was out of memory)"
                    if ending.killed_by == 9 else "")
            raise fail(f"the program was killed by {process.signal_name(ending.killed_by)}"
                       f"{hint}{quoted if stderr else ''}")
        if ending is not None and ending.code != 0:
            raise fail(f"the program exited with status {ending.code}"
                       f"{_exit_note(ending.code or 0)}{quoted}")
        metric = cfg.decide_on.name
        warnings: list[str] = []
        odd = not_regular(rd.metrics)  # a named pipe the program made there: never waited on
        if odd is not None:
            raise fail(f"its metrics file (PLUGDROP_METRICS, {rd.metrics}) {odd}; append the "
                       f"metric lines to it as a file")
        records = runs.read_records(rd.metrics, warnings)
        value, rec = runs.last_value(records, metric)
        if value is None:
            text = next((rec[metric] for rec in reversed(records) if metric in rec), None)
            if text is not None:  # logged, but not as a number: "0.73", null, [0.7]
                raise fail(f"the program logged {metric} as {json.dumps(text)[:60]}, not a "
                           f"number; log it as one ({metric}: 0.73, not \"0.73\")")
            names = runs.logged_names(records)
            where = source or (f"its metrics file (PLUGDROP_METRICS, {rd.metrics}) holds no "
                               f"record{': ' + warnings[0] if warnings else ''}")
            close = suggest(metric, names)
            said = (f"; it logged {', '.join(names[:12])}{' ...' if len(names) > 12 else ''}"
                    f"{close}" if names else f"; {where}")
            raise fail(f"the program exited with status 0 but logged no value of {metric} "
                       f"(decide_on){said}", "metric")
        if not finite(value):
            where = ", ".join(f"{k} {rec[k]}" for k in POSITION
                              if rec is not None and k in rec)
            raise fail(f"the run diverged: the last {metric} it logged is {value}"
                       f"{f' ({where})' if where else ''}")
        if cfg.receipt and cfg.variant(rd.variant).attachments:
            problem = receipt_problem(_read_receipt(rd), rd.variant, rd.id)
            if problem is not None:
                raise fail(problem, "receipt")
        done: dict[str, Any] = {
            "wall_time": ending.seconds if ending is not None else _judged_seconds(rd),
            "finished": runs.now(), "attempt": attempt, "decide_on": metric, "value": value,
            "records": len(records), "metrics_bytes": _size(rd.metrics)}
        if rec is not None and rec is not records[-1]:  # later records hold no value of it
            done["stale"] = (f"its last {metric} was logged at {_where(rec)}, its last record "
                             f"is at {_where(records[-1])}")
        runs.atomic_write_json(rd.path / "done.json", done, f"the end of run {rd.id}")
        (rd.path / "failed.json").unlink(missing_ok=True)

    def judging(self) -> dict[str, Any]:
        """The settings that only judge, as the config resolves them (what a failure of
        judging was judged under)."""
        resolved = self.cfg.resolved()
        return {k: resolved.get(k) for k in (*judging(), "receipt")}

    def located(self, line: str | None, variant: str) -> str | None:
        """``line`` with a place in the variant's spec file (``variant 'x':2:3``) replaced by
        the place of that attachment in the user's config."""
        if line is None or variant not in self.cfg.variant_names:
            return line
        v = self.cfg.variant(variant)
        starts = contract.spec_item_lines(v)

        def place(m: re.Match[str]) -> str:
            lineno = int(m.group(1))
            i = max((k for k, first in enumerate(starts) if first <= lineno), default=None)
            if i is None:
                return m.group(0)
            loc = v.attachments[i].loc or v.loc
            return f"{loc} (variant {variant!r})" if loc else m.group(0)

        return re.sub(re.escape(f"variant {variant!r}") + r":(\d+):\d+", place, line)

    def fail(self, rd: runs.RunDir, line: str, ending: process.Ending | None, out_log: Path,
             err_log: Path, stderr: list[str], attempt: int | None = None,
             reason: str | None = None) -> RunFailed:
        """Record the failure in ``failed.json`` (the line, how the program ended, the tail
        of its stderr, where its logs are, and ``reason``: ``metric`` or ``receipt`` when
        only its judging failed) and return the :class:`RunFailed` to raise."""
        line = one_line(line, limit=600)
        runs.atomic_write_json(rd.path / "failed.json", {
            "error": line, "type": None, "epoch": None, "traceback": "", "attempt": attempt,
            "exit_status": ending.code if ending is not None else 0,
            "signal": (process.signal_name(ending.killed_by)
                       if ending is not None and ending.killed_by is not None else None),
            "timed_out": bool(ending and ending.timed_out),
            "seconds": ending.seconds if ending is not None else None,
            JUDGED: reason is not None, "reason": reason, "judging": self.judging(),
            "stderr": stderr,
            "logs": {"stdout": str(out_log), "stderr": str(err_log)},
            "failed": runs.now()}, f"the failure of run {rd.id}")
        return RunFailed(line)


def _size(path: Path) -> int:
    """The size of ``path`` (0 when missing): what a finished run's values are read from,
    sealed (later appends are ignored)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _judged_seconds(rd: runs.RunDir) -> float | None:
    """The wall time of the attempt whose judging alone failed (``failed.json``'s
    ``seconds``): what a run judged again keeps."""
    try:
        failed = json.loads((rd.path / "failed.json").read_text())
    except (OSError, ValueError):
        return None
    seconds = failed.get("seconds") if isinstance(failed, dict) else None
    return float(seconds) if isinstance(seconds, (int, float)) and not isinstance(
        seconds, bool) and finite(seconds) and seconds >= 0 else None


def _read_receipt(rd: runs.RunDir) -> Any:
    """``attached.json`` of the run, ``None`` when missing, a string when unreadable (or not
    a regular file: never waited on)."""
    if (odd := not_regular(rd.path / "attached.json")) is not None:
        return odd
    try:
        return json.loads((rd.path / "attached.json").read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return f"unreadable ({e})"


def judged_before(rd: runs.RunDir, judge: Judge) -> str | None:
    """What becomes of a run whose last attempt failed in its judging only (the program
    exited with status 0: its training is complete): ``"rejudge"`` under other judging
    settings than ``judge``'s (a corrected ``decide_on``: judged again, not trained again);
    ``"retrain"`` under the same ones (the program was what had to change: trained again from
    the start); ``None`` for any other run."""
    try:
        failed = json.loads((rd.path / "failed.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(failed, dict) or failed.get(JUDGED) is not True:
        return None
    same = json.dumps(failed.get("judging"), sort_keys=True) == json.dumps(judge.judging(),
                                                                           sort_keys=True)
    return "retrain" if same else "rejudge"

"""The receipt of a run of ``plugdrop ablate`` whose program is this process: what it
attached, written to ``attached.json`` in the run's folder (``PLUGDROP_RECEIPT``) when the
variant is attached, after the optimizer steps 1, 2, 4, 8, ... of the process and at most
every 5 s after any other step or :meth:`plugdrop.AblationRun.log`, and at exit, with the
number of times each attachment's hooks ran (so a program that dies abruptly after a few
steps leaves what happened). The ablation reads it to tell a variant that had
no effect from one that was never attached (a forgotten ``attach``, a model that is not the one
that trains).

The file is a JSON object: ``by`` (what attached: ``run.attach``, a callback, the bootstrap),
``variant``, ``run`` (``PLUGDROP_RUN_ID``), ``attachments`` (per attachment: ``label``,
``layers``, ``calls``: hook runs, those of earlier attempts of the run included), ``steps`` (the
schedules' optimizer steps), ``models`` (the classes of the models attached to,
``module.Class``), ``updated``; ``error``: why the variant was not attached, or did not run as
written (the bootstrap found no model, its schedules never stepped).
"""

from __future__ import annotations

import atexit
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .spec import AttachmentGroup

__all__ = ["flag", "path", "rank_zero", "track", "unattached", "write"]

_TRACKED: list[tuple[AttachmentGroup, str]] = []
#: calls an earlier attempt of the run recorded, by label
_BEFORE: dict[str, int] = {}
_STATE = {"exit": False, "read": False}
#: the optimizer steps of this process since the first attachment was tracked
_STEPS = [0]
#: why the attachments did not run as written (the receipt's ``error``), when they did not
_ERROR: list[str] = []
#: when the receipt was last written (``time.monotonic``)
_WRITTEN = [-float("inf")]


def path() -> Path | None:
    """Where this process's receipt goes (``None`` outside a run of ``plugdrop ablate``)."""
    env = os.environ
    if env.get("PLUGDROP_RECEIPT"):
        return Path(env["PLUGDROP_RECEIPT"])
    if env.get("PLUGDROP_METRICS") and env.get("PLUGDROP_SEED") is not None:
        return Path(env["PLUGDROP_METRICS"]).parent / "attached.json"
    return None


def _earlier(target: Path, variant: str) -> None:
    """The calls an earlier attempt of this run recorded (read once per process)."""
    if _STATE["read"]:
        return
    _STATE["read"] = True
    try:
        old = json.loads(target.read_text())
    except (OSError, ValueError):
        return
    if isinstance(old, dict) and old.get("variant") == variant and old.get(
            "run", os.environ.get("PLUGDROP_RUN_ID")) == os.environ.get("PLUGDROP_RUN_ID"):
        for a in old.get("attachments") or []:
            if isinstance(a, dict) and isinstance(a.get("label"), str) \
                    and isinstance(a.get("calls"), int):
                _BEFORE[a["label"]] = a["calls"]


def track(group: AttachmentGroup, by: str) -> None:
    """Record ``group`` as the run's attachments (attached by ``by``) and write the receipt
    now and at exit. Outside a run, or on a rank other than 0, nothing is written."""
    target = path()
    if target is None:
        return
    _earlier(target, os.environ.get("PLUGDROP_VARIANT", ""))
    _TRACKED[:] = [(g, b) for g, b in _TRACKED if g is not group] + [(group, by)]
    if not _STATE["exit"]:
        _STATE["exit"] = True
        atexit.register(write)
        from ._attach import after_optimizer_steps  # noqa: PLC0415 - torch only when used

        after_optimizer_steps(_stepped)
    write()


def _stepped() -> None:
    """An optimizer step of the process: the receipt written at steps 1, 2, 4, 8, ...
    (what the first steps did, kept however the program ends), else at most every
    :data:`EVERY_S` seconds."""
    n = _STEPS[0] = _STEPS[0] + 1
    write(force=n & (n - 1) == 0)


#: a receipt is written again at most this often (a program that logs each step), and at exit
EVERY_S = 5.0


def write(force: bool = True) -> None:
    """Write the receipt of the tracked groups (with their hooks' counts so far); unless
    ``force``, only when the last one is :data:`EVERY_S` seconds old."""
    now = time.monotonic()
    if not force and now - _WRITTEN[0] < EVERY_S:  # first: what each optimizer step costs
        return
    target = path()
    if target is None or not _TRACKED or not rank_zero():
        return
    _WRITTEN[0] = now
    attachments = []
    for group, _ in _TRACKED:
        for label, h in zip(group.labels, group.handles):
            calls = sum(h.calls.values())
            attachments.append({"label": label, "layers": list(h.layers),
                                "calls": calls + _BEFORE.get(label, 0)})
    models = [f"{type(g.model).__module__}.{type(g.model).__qualname__}" for g, _ in _TRACKED]
    doc = {"by": ", ".join(dict.fromkeys(b for _, b in _TRACKED)),
           "variant": os.environ.get("PLUGDROP_VARIANT"),
           "run": os.environ.get("PLUGDROP_RUN_ID"),
           "attachments": attachments,
           "models": list(dict.fromkeys(models)),
           "steps": max(g.step_count for g, _ in _TRACKED),
           "pid": os.getpid(), "updated": time.time()}
    _write(target, {**doc, "error": _ERROR[-1]} if _ERROR else doc)


def flag(why: str) -> None:
    """Record that the attachments did not run as written (the receipt's ``error`` from its
    next write on: the run fails saying ``why``)."""
    _ERROR.append(why)


def unattached(why: str, by: str) -> None:
    """Record that the run's variant was not attached, and why (unless something else of
    this process attached it)."""
    target = path()
    if target is None or _TRACKED or not rank_zero():
        return
    _write(target, {"by": by, "variant": os.environ.get("PLUGDROP_VARIANT"),
                    "run": os.environ.get("PLUGDROP_RUN_ID"), "error": why,
                    "pid": os.getpid(), "updated": time.time()})


def _write(target: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` whole (a temporary file renamed over the receipt); a receipt that cannot
    be written is not worth failing the training for: the ablation says it is missing."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, target)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def rank_zero() -> bool:
    """Whether this process is rank 0 of its training (or not distributed at all)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank() == 0
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return all(os.environ.get(v, "0") in ("0", "") for v in ("RANK", "LOCAL_RANK", "NODE_RANK"))

"""The results of an ablation as its run folders hold them: :func:`load_ablation`.

Everything here reads the folder that ``plugdrop ablate --out DIR`` writes (``ablation.json``,
the stored config and ``runs/<id>/``) and nothing else, so ``plugdrop report DIR`` gives the
same answer as the runner, at any time, also while runs are still going on elsewhere: a run is
*finished* when it has ``done.json``, *failed* when it has ``failed.json``, and *incomplete*
otherwise (running, killed, or not started). Damaged files of one run are reported as warning
lines and that run counts as incomplete; only a missing or damaged ``ablation.json`` (or stored
config) is an error. The settings are the config's, read back through the loader's checks
(:func:`~plugdrop.ablate.config.load_settings`): the report knows no default of its own.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import AblationConfig, load_settings
from ..errors import ConfigError
from . import receipts
from .placed import not_regular
from .manifest import accepted_hashes, changed, sections_of, trains_of
from ..runs import FAILED, FINISHED, INCOMPLETE, finite, number, read_records
from ..runs import now as stamp
from ..runs import run_id as _run_id

__all__ = ["FAILED", "FINISHED", "FORMAT", "INCOMPLETE", "Ablation", "Run", "as_dict",
           "as_list", "load_ablation", "load_run", "number"]

#: the format of ``ablation.json`` this version reads
FORMAT = 1
_RUN_ID = re.compile(r"[A-Za-z0-9_.,=+\[\]-]+")


@dataclass
class Run:
    """One run (variant x seed) as found on disk.

    Attributes:
        id: the folder name under ``runs/``.
        variant, seed: what it trains.
        path: its folder.
        status: ``"finished"``, ``"failed"`` or ``"incomplete"``.
        metrics: one record per epoch (``metrics.jsonl``), sorted by epoch, one per epoch; of a
            ``program:``'s run, the records it logged (``epoch`` or ``step`` and any metrics,
            merged by position: :func:`~plugdrop.ablate.runs.read_records`).
        info: ``run.json`` when readable.
        done: ``done.json`` of a finished run.
        error, error_type, failed_epoch: from ``failed.json`` of a failed run.
        gradcam: its ``gradcam.png`` when present.
        started: whether its folder holds anything yet.
    """

    id: str
    variant: str
    seed: int
    path: Path
    status: str = INCOMPLETE
    metrics: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] | None = None
    done: dict[str, Any] | None = None
    error: str | None = None
    error_type: str | None = None
    failed_epoch: int | None = None
    gradcam: Path | None = None
    started: bool = False
    #: the receipt of what the run's program attached (``attached.json``), or ``None``
    attached: dict[str, Any] | None = None

    def final(self, key: str) -> float | None:
        """``key`` of the last epoch (the last record that holds it), ``None`` when
        absent."""
        for m in reversed(self.metrics):
            value = number(m.get(key))
            if value is not None:
                return value
        return None

    def best(self, key: str) -> float | None:
        """The largest ``key`` over the epochs, ``None`` when absent."""
        values = [v for v in (number(m.get(key)) for m in self.metrics)
                  if v is not None and not math.isnan(v)]
        return max(values) if values else None


@dataclass
class Ablation:
    """An ablation folder: what ``ablation.json`` promises and what the runs hold.

    Attributes:
        out: the folder.
        config: the config the ablation trains, as the loader checked it.
        config_hash: the config's hash (a run of another config is not counted).
        variants: variant names in config order.
        baseline: the variant the others are compared to, or ``None``.
        seeds: the seeds of the config.
        runs: every run of ``ablation.json``, in its order.
        versions, data: as recorded by the runner.
        warnings: one line per damaged file or record that was skipped.
        trains: what trained the runs, in words (``resnet18 on digits``, ``program ...``).
        sections: the report's sections its runs supply (what the program recorded:
            plugdrop's trainer ``epochs``, ``calibration``, ``drop_fraction``, ``gradcam``; a
            ``program:`` ``logged``).
    """

    out: Path
    config: AblationConfig
    config_hash: str | None
    variants: list[str]
    baseline: str | None
    seeds: list[int]
    runs: list[Run]
    versions: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    trains: str = ""
    sections: tuple[str, ...] = ()
    #: the hashes the folder's runs recorded before a version changed how it is computed
    earlier_hashes: tuple[str, ...] = ()
    #: each change of the settings that judge, made on a resume after runs had ended
    judging_changes: list[dict[str, Any]] = field(default_factory=list)
    #: what the report computed of these runs once (its own business; a copy starts empty)
    memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def count(self, status: str) -> int:
        """How many runs have ``status``."""
        return sum(r.status == status for r in self.runs)


def _read_json(path: Path) -> tuple[Any, str | None]:
    """``(content, None)``, or ``(None, problem)`` with ``problem`` a few words."""
    if (odd := not_regular(path)) is not None:
        return None, odd
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, "missing"
    except (OSError, UnicodeDecodeError) as e:
        return None, f"unreadable ({getattr(e, 'strerror', None) or e})"
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        return None, f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"


def _not_ablation(path: Path, problem: str) -> ConfigError:
    return ConfigError(
        f"{path}: {problem}: {path.parent} is not an ablation folder (give the --out folder of "
        "`plugdrop ablate`, which holds ablation.json and runs/)")


def load_ablation(out: Path | str, cfg: AblationConfig | None = None) -> Ablation:
    """Read an ablation folder: ``ablation.json`` and every run's folder.

    Tolerant of what a killed or running ablation leaves: a truncated last line of
    ``metrics.jsonl`` is skipped, a run without a folder is incomplete (not started), and a
    missing or damaged ``run.json`` / ``done.json`` / ``failed.json`` gives a line in
    :attr:`Ablation.warnings` and counts the run as incomplete. Folders under ``runs/`` that
    ``ablation.json`` does not list are ignored.

    Args:
        out: the ablation's ``--out`` folder.
        cfg: the config its runs train under, when the caller holds it (the driver): not read
            back from the folder then.

    Raises:
        ConfigError: ``out`` is not a folder, or its ``ablation.json`` is missing or damaged.
    """
    out = Path(out)
    if not out.is_dir():
        raise ConfigError(f"{out}: not a folder: give the --out folder of `plugdrop ablate`")
    path = out / "ablation.json"
    doc, problem = _read_json(path)
    if problem is not None:
        raise _not_ablation(path, problem)
    if not isinstance(doc, dict):
        raise _not_ablation(path, "not a JSON object")
    if doc.get("format") != FORMAT:
        raise ConfigError(f"{path}: format {doc.get('format')!r} is not the one this plugdrop "
                          f"reads ({FORMAT}): use the plugdrop version that wrote it")
    entries = doc.get("runs")
    if not isinstance(entries, list):
        raise _not_ablation(path, "no list of runs")
    config_hash = doc.get("config_hash")
    config_hash = config_hash if isinstance(config_hash, str) else None
    earlier = tuple(h for h in as_list(doc.get("earlier_hashes")) if isinstance(h, str))
    cfg, warning = (cfg, None) if cfg is not None else load_settings(out)
    ab = Ablation(out=out, config=cfg, config_hash=config_hash,
                  variants=[v for v in as_list(doc.get("variants")) if isinstance(v, str)],
                  baseline=doc.get("baseline") if isinstance(doc.get("baseline"), str) else None,
                  seeds=[s for s in as_list(doc.get("seeds"))
                         if isinstance(s, int) and not isinstance(s, bool)],
                  runs=[], versions=as_dict(doc.get("versions")), data=as_dict(doc.get("data")),
                  warnings=[warning] if warning else [], trains=trains_of(doc, cfg),
                  sections=sections_of(doc), earlier_hashes=earlier,
                  judging_changes=[c for c in as_list(doc.get("judging_changes"))
                                   if isinstance(c, dict)])
    now = changed(as_dict(doc.get("config")), cfg)
    accepted = (config_hash, *earlier) if config_hash is not None else None
    for i, e in enumerate(entries):
        if not (isinstance(e, dict) and isinstance(e.get("id"), str)
                and _RUN_ID.fullmatch(e["id"]) and e["id"] not in (".", "..")
                and isinstance(e.get("variant"), str) and isinstance(e.get("seed"), int)
                and not isinstance(e.get("seed"), bool)):
            raise _not_ablation(path, f"runs[{i}] is not {{\"id\", \"variant\", \"seed\"}}")
        program = cfg.program is not None
        run = load_run(out, e["variant"], e["seed"], accepted, program, ab.warnings, e["id"],
                       cfg.decide_on.name if program else None)
        ab.runs.append(run)
        if run.variant not in ab.variants:
            ab.variants.append(run.variant)
    if now:  # a report that judges otherwise than the folder's config: when, and what
        ab.judging_changes.append({
            "changed": now, "runs_ended": sum(r.status != INCOMPLETE for r in ab.runs),
            "at": f"{stamp()}, by this report (plugdrop report --decide-on / --set)"})
    return ab


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _read_metrics(path: Path, warnings: list[str]) -> list[dict[str, Any]]:
    """The epoch records of ``metrics.jsonl``: a damaged last line (a killed writer) is skipped
    silently, a damaged line before it with a warning; a repeated epoch keeps its last record."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as e:
        warnings.append(f"{path}: unreadable ({e.strerror or e}); its epochs are left out")
        return []
    lines = [(i + 1, line) for i, line in
             enumerate(raw.decode("utf-8", errors="replace").splitlines()) if line.strip()]
    by_epoch: dict[int, dict[str, Any]] = {}
    for k, (lineno, line) in enumerate(lines):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            rec = None
        epoch = rec.get("epoch") if isinstance(rec, dict) else None
        if (not isinstance(rec, dict) or not isinstance(epoch, int) or isinstance(epoch, bool)
                or epoch < 1 or (number(rec.get("val_acc")) is None  # eval_every: not
                                 and number(rec.get("train_loss")) is None)):  # evaluated
            if k < len(lines) - 1:
                warnings.append(f"{path}: line {lineno} is not an epoch record; skipped")
            continue
        by_epoch[epoch] = rec
    return [by_epoch[e] for e in sorted(by_epoch)]


#: the files of a run folder that :func:`load_run` reads or looks at
_READ = ("run.json", "metrics.jsonl", "done.json", "failed.json", "gradcam.png",
         "attached.json")
#: runs read before that had ended, by folder: the identity of their files when read (size
#: and modification time of each) and what was read; an ended run whose files still have that
#: identity is not read again (a report rebuilt while a study runs reads only what changed)
_ENDED: dict[str, tuple[Any, Run]] = {}
#: at most so many ended runs are remembered (a process that reports many folders)
_ENDED_MOST = 200_000


def _identity(folder: Path) -> Any:
    """The size and modification time of each file :func:`load_run` reads in ``folder``."""
    try:
        with os.scandir(folder) as entries:
            found = [(e.name, e.stat()) for e in entries if e.name in _READ]
    except OSError:
        return None
    return tuple(sorted((name, st.st_size, st.st_mtime_ns) for name, st in found))


def load_run(out: Path, variant: str, seed: int, config_hash: str | Sequence[str] | None,
             program: bool, warnings: list[str], run_id: str | None = None,
             metric: str | None = None) -> Run:
    """Run ``variant`` x ``seed`` of the folder ``out`` as its folder holds it now
    (``program``: a ``program:``'s run, its metrics as it logged them; ``metric``: the
    decision metric, under which a run whose judging alone failed is judged; ``config_hash``: the
    ablation's (or the hashes it accepts, :func:`accepted_hashes`), a run of another counts as
    incomplete); a line per damaged file is appended to
    ``warnings``. A run that had ended when read before, and whose files have not changed
    since, is not read again. See :func:`load_ablation`."""
    rid = run_id if run_id is not None else _run_id(variant, seed)
    path = out / "runs" / rid
    identity = (_identity(path), config_hash, program, variant, seed, metric)
    hit = _ENDED.get(str(path))
    if hit is not None and hit[0] == identity:
        return replace(hit[1])
    run = Run(id=rid, variant=variant, seed=seed, path=path)
    said = len(warnings)
    _fill(run, config_hash, warnings, program, metric)
    if run.status != INCOMPLETE and len(warnings) == said and identity[0] is not None:
        if len(_ENDED) >= _ENDED_MOST:
            _ENDED.clear()
        _ENDED[str(path)] = (identity, replace(run))
    return run


def _sealed(done: Any) -> int | None:
    """The size of a finished program run's metrics file when it was judged (``done.json``'s
    ``metrics_bytes``), ``None`` when not recorded."""
    size = done.get("metrics_bytes") if isinstance(done, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None


def _fill(run: Run, config_hash: str | Sequence[str] | None, warnings: list[str],
          program: bool, metric: str | None = None) -> None:
    """Fill ``run`` from its folder."""
    run.started = run.path.is_dir() and any(run.path.iterdir())
    if not run.started:
        return  # its folder is absent or was just created
    problems: list[str] = []
    info, problem = _read_json(run.path / "run.json")
    if problem is not None or not isinstance(info, dict):
        problems.append(f"run.json {problem or 'is not a JSON object'}")
    else:
        run.info = info
        accepted = (config_hash,) if isinstance(config_hash, str) else config_hash
        if accepted is not None and info.get("config_hash") not in (None, *accepted):
            problems.append("run.json has another config_hash than ablation.json (a run of "
                            "another config)")
        elif info.get("variant", run.variant) != run.variant or info.get("seed",
                                                                         run.seed) != run.seed:
            problems.append("run.json names another variant or seed than ablation.json")
    done_path, failed_path = run.path / "done.json", run.path / "failed.json"
    ended = done_path.exists()
    done, problem = _read_json(done_path) if ended else (None, None)
    sealed = _sealed(done) if program and problem is None else None
    odd = not_regular(run.path / "metrics.jsonl")
    if odd is not None:
        warnings.append(f"{run.path / 'metrics.jsonl'}: {odd}; its records are left out")
    run.metrics = ([] if odd is not None else
                   read_records(run.path / "metrics.jsonl", warnings, sealed) if program
                   else _read_metrics(run.path / "metrics.jsonl", warnings))
    gradcam = run.path / "gradcam.png"
    run.gradcam = gradcam if gradcam.is_file() else None
    if program and (run.path / "attached.json").exists():
        receipt, problem = _read_json(run.path / "attached.json")
        problem = problem or receipts.check(receipt, run.id, run.variant)
        if problem is None:
            run.attached = receipt
        else:
            warnings.append(f"{run.path / 'attached.json'}: {problem}; what the run attached "
                            f"is not shown")
    if ended:
        if problem is not None or not isinstance(done, dict):
            problems.append(f"done.json {problem or 'is not a JSON object'}")
        else:
            run.done = done
            if isinstance(done.get("stale"), str):  # the judge's word: an earlier value
                warnings.append(f"{run.path}: {done['stale']}: its final value is that "
                                f"earlier one")
            epochs = done.get("epochs")
            if not run.metrics:
                problems.append("finished, but metrics.jsonl has no "
                                + ("record" if program else "epoch"))
            elif isinstance(epochs, int) and epochs != run.metrics[-1]["epoch"]:
                problems.append(f"done.json says {epochs} epochs, metrics.jsonl ends at epoch "
                                f"{run.metrics[-1]['epoch']}")
        if not problems:
            run.status = FINISHED
    elif failed_path.exists():
        failed, problem = _read_json(failed_path)
        if problem is not None or not isinstance(failed, dict):
            problems.append(f"failed.json {problem or 'is not a JSON object'}")
        else:
            if failed.get("reason") == "metric" and metric is not None \
                    and finite(run.final(metric)):
                # its program completed without the metric it was judged on then; judged on
                # one it logged, it finished (a report with another decide_on)
                seconds = failed.get("seconds")  # its training's, which judging keeps
                run.done = {"value": run.final(metric), "rejudged": True,
                            "wall_time": seconds if finite(number(seconds)) else None}
                run.status = FINISHED
                return
            lines = str(failed.get("error") or "").strip().splitlines()
            run.error = lines[0][:300] if lines else "(no message)"
            run.error_type = str(failed["type"]) if failed.get("type") else None
            epoch = failed.get("epoch")
            run.failed_epoch = epoch if isinstance(epoch, int) else None
        if not problems:
            run.status = FAILED
    for p in problems:
        warnings.append(f"{run.path}: {p}; counted as incomplete")

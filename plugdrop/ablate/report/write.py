"""The files of an ablation's summary, rebuilt from its run folders: ``results.csv``,
``results.json``, the plots and ``report.html`` (:func:`write_report`), also while it runs
(the study's report listener calls it).

Every file is written atomically (a temporary file in the same folder, then :func:`os.replace`),
so a reader never sees half a file.

Example::

    >>> rep = write_report(Path("runs/digits"))
    >>> print(rep.table)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import AblationConfig
from ..results import FAILED, FINISHED, FORMAT, INCOMPLETE, Ablation, load_ablation
from ..runs import atomic_write_bytes, serialized, storage_error, thinned
from .html import render
from .sections import CSV_COLUMNS, Facts, facts
from .summary import run_counts, summarize
from .table import table

__all__ = ["CSV_COLUMNS", "Report", "write_report"]

@dataclass
class Report:
    """What :func:`write_report` did.

    Attributes:
        table: the text table of :func:`table`.
        files: every file written, plus the runs' Grad-CAM images.
        finished, failed, incomplete: run counts.
        warnings: the lines about damaged files (also at the end of ``table``).
    """

    table: str
    files: list[Path]
    finished: int
    failed: int
    incomplete: int
    warnings: list[str] = field(default_factory=list)


def _plain(value: Any) -> Any:
    """JSON-safe: NaN and infinities become ``null``, paths strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _json(f: Facts) -> bytes:
    ab, summary = f.ab, f.summary
    runs = [{"id": r.id, "variant": r.variant, "seed": r.seed, "status": r.status,
             "epochs": len(r.metrics), "error": r.error, "error_type": r.error_type,
             "failed_epoch": r.failed_epoch, "done": r.done,
             "gradcam": str(r.gradcam.relative_to(ab.out)) if r.gradcam else None,
             "records": len(r.metrics), "metrics": thinned(r.metrics)} for r in ab.runs]
    doc = {"format": FORMAT, "config": ab.config.resolved(), "config_hash": ab.config_hash,
           "versions": ab.versions, "data": ab.data, "variants": ab.variants,
           "baseline": ab.baseline, "seeds": ab.seeds,
           "counts": run_counts(ab, summary),
           "summary": [s.as_dict() for s in summary], "runs": runs, "warnings": ab.warnings}
    for section in f.sections:
        doc.update(section.data(f))
    return (json.dumps(_plain(doc), indent=2, allow_nan=False) + "\n").encode("utf-8")


def write_report(out: Path | str, *, plots: bool = True, confidence: float = 0.95,
                 cfg: AblationConfig | None = None) -> Report:
    """Rebuild ``results.csv``, ``results.json`` and the plots of an ablation folder from its
    run folders, and return the table.

    ``results.csv`` has a row per epoch of every finished and incomplete run (columns
    :data:`CSV_COLUMNS`); ``results.json`` the config, versions, data, every run's status and
    metrics, and the summary with its statistics. Plots (``plots=True``): ``val_acc.png``,
    ``final_acc.png``, ``forest.png`` (the verdicts), ``calibration.png``, ``seeds.png`` (an
    adaptive design) and, when drop fractions were watched, ``drop_frac.png``. ``report.html``
    (:mod:`.html`) is rebuilt every time, with the plots as they are on disk. Each file is
    replaced atomically, so this is safe while an ablation writes into the same folder.

    Args:
        out: the ablation's ``--out`` folder.
        plots: whether to draw the PNG plots (matplotlib).
        confidence: confidence level of the intervals and verdicts (default 0.95).
        cfg: the config the runs train under, when the caller holds it (the study driver);
            default: the one stored in the folder, read back through the loader's checks.

    Raises:
        ConfigError: not an ablation folder (see :func:`load_ablation`).
        StorageError: a file cannot be written (full, read-only: one line naming it); the
            files written before are whole.
    """
    folder = Path(out)
    if not (folder / "ablation.json").is_file():  # not an ablation: load_ablation says so
        return _write_report(folder, plots, confidence, cfg)
    with serialized(folder / ".report.lock"):  # one rebuild at a time: the newest wins
        return _write_report(folder, plots, confidence, cfg)


def _write_report(out: Path | str, plots: bool, confidence: float,
                  cfg: AblationConfig | None) -> Report:
    ab = load_ablation(out, cfg)
    summary = summarize(ab, confidence)
    f = facts(ab, summary, confidence)
    rows = next((data for s in f.sections if (data := s.csv(f)) is not None), b"")
    outputs: list[tuple[Path, bytes | None]] = [
        (ab.out / "results.csv", rows), (ab.out / "results.json", _json(f))]
    if plots:
        outputs += [(ab.out / name, png) for s in f.sections for name, png in s.plots(f)]
    text = table(ab, summary, f)
    files = _write(ab, outputs)
    files += _write(ab, [(ab.out / "report.html", render(f, text))])
    files += [r.gradcam for r in ab.runs if r.gradcam is not None]
    c = run_counts(ab, summary)
    return Report(text, files, c[FINISHED], c[FAILED], c[INCOMPLETE], list(ab.warnings))


def _write(ab: Ablation, outputs: list[tuple[Path, bytes | None]]) -> list[Path]:
    """Write each file atomically (``None``: nothing to draw, so no stale file either);
    a failed write raises :class:`~plugdrop.ablate.errors.StorageError`."""
    files = []
    for path, data in outputs:
        if data is None:  # nothing to draw: no stale plot either
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:
                raise storage_error(e, path, "the report") from None
            continue
        atomic_write_bytes(path, data, "the report")
        files.append(path)
    return files

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

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import AblationConfig
from ..runs import atomic_write_bytes, serialized, storage_error
from . import logged
from .figures import plot_calibration, plot_forest, plot_seeds
from .html import render
from .plots import plot_drop_frac, plot_final_acc, plot_val_acc
from ..results import FAILED, FINISHED, FORMAT, INCOMPLETE, Ablation, load_ablation
from .summary import VariantSummary, run_counts, summarize
from .table import table

__all__ = ["CSV_COLUMNS", "Report", "write_report"]

#: The columns of ``results.csv``: one row per run and epoch.
CSV_COLUMNS = ("variant", "seed", "epoch", "train_loss", "val_loss", "val_acc", "val_loss_ema",
               "val_acc_ema", "epoch_time", "images_per_s", "lr", "val_nll", "val_top5",
               "val_ece", "train_acc", "gap")


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


def _cell(value: Any) -> str:
    if value is None or isinstance(value, (dict, list)):
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _csv(ab: Ablation) -> bytes:
    if ab.config.program is not None:  # the columns are the metrics it logged
        return logged.csv_bytes(ab)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in ab.runs:
        if r.status == FAILED:
            continue
        for m in r.metrics:
            row = {**m, "variant": r.variant, "seed": r.seed}
            w.writerow([_cell(row.get(c)) for c in CSV_COLUMNS])
    return buf.getvalue().encode("utf-8")


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


def _json(ab: Ablation, summary: Sequence[VariantSummary]) -> bytes:
    runs = [{"id": r.id, "variant": r.variant, "seed": r.seed, "status": r.status,
             "epochs": len(r.metrics), "error": r.error, "error_type": r.error_type,
             "failed_epoch": r.failed_epoch, "done": r.done,
             "gradcam": str(r.gradcam.relative_to(ab.out)) if r.gradcam else None,
             "metrics": r.metrics} for r in ab.runs]
    doc = {"format": FORMAT, "config": ab.config.resolved(), "config_hash": ab.config_hash,
           "versions": ab.versions, "data": ab.data, "variants": ab.variants,
           "baseline": ab.baseline, "seeds": ab.seeds,
           "counts": run_counts(ab, summary),
           "summary": [s.as_dict() for s in summary], "runs": runs, "warnings": ab.warnings}
    if ab.config.program is not None:  # every metric it logged, per variant
        conf = summary[0].final.confidence if summary else 0.95
        doc["logged"] = {v: {m: iv.as_dict() for m, iv in row.items()}
                         for v, row in logged.final_values(ab, conf).items()}
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
    outputs: list[tuple[Path, bytes | None]] = [
        (ab.out / "results.csv", _csv(ab)), (ab.out / "results.json", _json(ab, summary))]
    if plots and ab.config.program is not None:  # its own metrics (logged.LEFT_OUT: why)
        outputs += [(ab.out / "curves.png", logged.plot_curves(ab)),
                    (ab.out / "forest.png", plot_forest(summary, ab.baseline)),
                    (ab.out / "seeds.png", plot_seeds(summary))]
    elif plots:
        outputs += [(ab.out / "val_acc.png", plot_val_acc(ab, confidence)),
                    (ab.out / "final_acc.png", plot_final_acc(summary)),
                    (ab.out / "drop_frac.png", plot_drop_frac(ab)),
                    (ab.out / "forest.png", plot_forest(summary, ab.baseline)),
                    (ab.out / "seeds.png", plot_seeds(summary)),
                    (ab.out / "calibration.png", plot_calibration(ab))]
    text = table(ab, summary)
    files = _write(ab, outputs)
    files += _write(ab, [(ab.out / "report.html", render(ab, summary, text))])
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

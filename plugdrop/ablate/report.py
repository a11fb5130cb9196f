"""The results of an ablation, rebuilt from its run folders: table, CSV, JSON and plots.

Everything here reads the folder that ``plugdrop ablate --out DIR`` writes (``ablation.json`` and
``runs/<id>/``) and nothing else, so ``plugdrop report DIR`` gives the same answer as the runner,
at any time, also while runs are still going on elsewhere: a run is *finished* when it has
``done.json``, *failed* when it has ``failed.json``, and *incomplete* otherwise (running, killed,
or not started). Damaged files of one run are reported as warning lines and that run counts as
incomplete; only a missing or damaged ``ablation.json`` is an error.

Every file is written atomically (a temporary file in the same folder, then :func:`os.replace`),
so a reader never sees half a file.

Example::

    >>> rep = write_report(Path("runs/digits"))
    >>> print(rep.table)
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .runs import atomic_write_bytes, serialized
from .stats import Interval, Paired, mean_ci, paired_difference

#: Accuracies live in [0, 1]: their intervals are cut to it (no "104%").
ACC = (0.0, 1.0)

__all__ = ["CSV_COLUMNS", "Ablation", "Report", "Run", "VariantSummary", "load_ablation",
           "summarize", "table", "write_report"]

#: The columns of ``results.csv``: one row per run and epoch.
CSV_COLUMNS = ("variant", "seed", "epoch", "train_loss", "val_loss", "val_acc", "val_loss_ema",
               "val_acc_ema", "epoch_time", "images_per_s", "lr")

FINISHED, FAILED, INCOMPLETE = "finished", "failed", "incomplete"

_FORMAT = 1
_RUN_ID = re.compile(r"[A-Za-z0-9_.,=+\[\]-]+")
_DROP = "/drop_frac"
_SCHEDULED = "/p"


# --------------------------------------------------------------------------- reading


@dataclass
class Run:
    """One run (variant x seed) as found on disk.

    Attributes:
        id: the folder name under ``runs/``.
        variant, seed: what it trains.
        path: its folder.
        status: ``"finished"``, ``"failed"`` or ``"incomplete"``.
        metrics: one record per epoch (``metrics.jsonl``), sorted by epoch, one per epoch.
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

    def final(self, key: str = "val_acc") -> float | None:
        """``key`` of the last epoch, ``None`` when absent."""
        return _number(self.metrics[-1].get(key)) if self.metrics else None

    def best(self, key: str = "val_acc") -> float | None:
        """The largest ``key`` over the epochs, ``None`` when absent."""
        values = [v for v in (_number(m.get(key)) for m in self.metrics)
                  if v is not None and not math.isnan(v)]
        return max(values) if values else None


@dataclass
class Ablation:
    """An ablation folder: what ``ablation.json`` promises and what the runs hold.

    Attributes:
        out: the folder.
        config: the resolved config as plain JSON.
        config_hash: the config's hash (a run of another config is not counted).
        variants: variant names in config order.
        baseline: the variant the others are compared to, or ``None``.
        seeds: the seeds of the config.
        runs: every run of ``ablation.json``, in its order.
        versions, data: as recorded by the runner.
        warnings: one line per damaged file or record that was skipped.
    """

    out: Path
    config: dict[str, Any]
    config_hash: str | None
    variants: list[str]
    baseline: str | None
    seeds: list[int]
    runs: list[Run]
    versions: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def count(self, status: str) -> int:
        """How many runs have ``status``."""
        return sum(r.status == status for r in self.runs)


def _number(value: Any) -> float | None:
    """``value`` as a float when it is a JSON number (not a bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _read_json(path: Path) -> tuple[Any, str | None]:
    """``(content, None)``, or ``(None, problem)`` with ``problem`` a few words."""
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


def load_ablation(out: Path | str) -> Ablation:
    """Read an ablation folder: ``ablation.json`` and every run's folder.

    Tolerant of what a killed or running ablation leaves: a truncated last line of
    ``metrics.jsonl`` is skipped, a run without a folder is incomplete (not started), and a
    missing or damaged ``run.json`` / ``done.json`` / ``failed.json`` gives a line in
    :attr:`Ablation.warnings` and counts the run as incomplete. Folders under ``runs/`` that
    ``ablation.json`` does not list are ignored.

    Args:
        out: the ablation's ``--out`` folder.

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
    if doc.get("format") != _FORMAT:
        raise ConfigError(f"{path}: format {doc.get('format')!r} is not the one this plugdrop "
                          f"reads ({_FORMAT}): use the plugdrop version that wrote it")
    entries = doc.get("runs")
    if not isinstance(entries, list):
        raise _not_ablation(path, "no list of runs")
    config_hash = doc.get("config_hash")
    config_hash = config_hash if isinstance(config_hash, str) else None
    ab = Ablation(out=out, config=_dict(doc.get("config")), config_hash=config_hash,
                  variants=[v for v in _list(doc.get("variants")) if isinstance(v, str)],
                  baseline=doc.get("baseline") if isinstance(doc.get("baseline"), str) else None,
                  seeds=[s for s in _list(doc.get("seeds"))
                         if isinstance(s, int) and not isinstance(s, bool)],
                  runs=[], versions=_dict(doc.get("versions")), data=_dict(doc.get("data")))
    for i, e in enumerate(entries):
        if not (isinstance(e, dict) and isinstance(e.get("id"), str)
                and _RUN_ID.fullmatch(e["id"]) and e["id"] not in (".", "..")
                and isinstance(e.get("variant"), str) and isinstance(e.get("seed"), int)
                and not isinstance(e.get("seed"), bool)):
            raise _not_ablation(path, f"runs[{i}] is not {{\"id\", \"variant\", \"seed\"}}")
        run = Run(id=e["id"], variant=e["variant"], seed=e["seed"], path=out / "runs" / e["id"])
        _load_run(run, config_hash, ab.warnings)
        ab.runs.append(run)
        if run.variant not in ab.variants:
            ab.variants.append(run.variant)
    return ab


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
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
                or epoch < 1 or _number(rec.get("val_acc")) is None):
            if k < len(lines) - 1:
                warnings.append(f"{path}: line {lineno} is not an epoch record; skipped")
            continue
        by_epoch[epoch] = rec
    return [by_epoch[e] for e in sorted(by_epoch)]


def _load_run(run: Run, config_hash: str | None, warnings: list[str]) -> None:
    """Fill ``run`` from its folder; see :func:`load_ablation`."""
    run.started = run.path.is_dir() and any(run.path.iterdir())
    if not run.started:
        return  # its folder is absent or was just created
    problems: list[str] = []
    info, problem = _read_json(run.path / "run.json")
    if problem is not None or not isinstance(info, dict):
        problems.append(f"run.json {problem or 'is not a JSON object'}")
    else:
        run.info = info
        if config_hash is not None and info.get("config_hash") not in (None, config_hash):
            problems.append("run.json has another config_hash than ablation.json (a run of "
                            "another config)")
        elif info.get("variant", run.variant) != run.variant or info.get("seed",
                                                                         run.seed) != run.seed:
            problems.append("run.json names another variant or seed than ablation.json")
    run.metrics = _read_metrics(run.path / "metrics.jsonl", warnings)
    gradcam = run.path / "gradcam.png"
    run.gradcam = gradcam if gradcam.is_file() else None
    done_path, failed_path = run.path / "done.json", run.path / "failed.json"
    if done_path.exists():
        done, problem = _read_json(done_path)
        if problem is not None or not isinstance(done, dict):
            problems.append(f"done.json {problem or 'is not a JSON object'}")
        else:
            run.done = done
            epochs = done.get("epochs")
            if not run.metrics:
                problems.append("finished, but metrics.jsonl has no epoch")
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
            lines = str(failed.get("error") or "").strip().splitlines()
            run.error = lines[0][:300] if lines else "(no message)"
            run.error_type = str(failed["type"]) if failed.get("type") else None
            epoch = failed.get("epoch")
            run.failed_epoch = epoch if isinstance(epoch, int) else None
        if not problems:
            run.status = FAILED
    for p in problems:
        warnings.append(f"{run.path}: {p}; counted as incomplete")


# --------------------------------------------------------------------------- statistics


@dataclass
class VariantSummary:
    """What a variant's runs say, with the statistics over seeds.

    Attributes:
        variant: its name.
        is_baseline: whether it is the ablation's baseline.
        runs, finished, failed, incomplete: how many runs, by status.
        final, best: final / best validation accuracy over the finished seeds (mean and CI).
        final_ema, best_ema: the same for the EMA weights, ``None`` without EMA.
        diff: final accuracy minus the baseline's, paired by seed; ``None`` for the baseline
            itself or without a baseline.
        diff_ema: the same for the EMA accuracy.
        epoch_time: median seconds per epoch, each run's first epoch left out (warm-up).
        time_ratio: ``epoch_time`` over the baseline's.
        time_with_first: whether the runs had only a first epoch, so ``epoch_time`` includes it.
        failures: ``(run id, one-line error)`` of each failed run.
    """

    variant: str
    is_baseline: bool
    runs: int
    finished: int
    failed: int
    incomplete: int
    final: Interval
    best: Interval
    final_ema: Interval | None = None
    best_ema: Interval | None = None
    diff: Paired | None = None
    diff_ema: Paired | None = None
    epoch_time: float | None = None
    time_ratio: float | None = None
    time_with_first: bool = False
    failures: list[tuple[str, str]] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """``"baseline"``, the paired comparison's verdict, or ``""`` without a baseline."""
        if self.is_baseline:
            return "baseline"
        return self.diff.verdict if self.diff is not None else ""

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able fields, the statistics included."""

        def opt(x: Interval | Paired | None) -> dict[str, object] | None:
            return x.as_dict() if x is not None else None

        return {"variant": self.variant, "baseline": self.is_baseline, "runs": self.runs,
                "finished": self.finished, "failed": self.failed,
                "incomplete": self.incomplete, "final_acc": self.final.as_dict(),
                "best_acc": self.best.as_dict(), "final_acc_ema": opt(self.final_ema),
                "best_acc_ema": opt(self.best_ema), "diff_final_acc": opt(self.diff),
                "diff_final_acc_ema": opt(self.diff_ema), "verdict": self.verdict,
                "epoch_time": self.epoch_time, "time_vs_baseline": self.time_ratio,
                "epoch_time_includes_first_epoch": self.time_with_first,
                "failures": [{"id": i, "error": e} for i, e in self.failures]}


def _by_seed(runs: Iterable[Run], pick: str, key: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for r in runs:
        v = r.final(key) if pick == "final" else r.best(key)
        if v is not None and not math.isnan(v):
            out[r.seed] = v
    return out


def _epoch_time(runs: Sequence[Run]) -> tuple[float | None, bool]:
    """Median epoch time without each run's first epoch, and whether it had to include it."""
    def times(start: int) -> list[float]:
        return [t for r in runs for m in r.metrics[start:]
                if (t := _number(m.get("epoch_time"))) is not None and math.isfinite(t)]

    later = times(1)
    if later:
        return statistics.median(later), False
    first = times(0)
    return (statistics.median(first), True) if first else (None, False)


def summarize(ab: Ablation, confidence: float = 0.95) -> list[VariantSummary]:
    """Per variant (config order): run counts, final and best validation accuracy over the
    finished seeds with confidence intervals (and for EMA when recorded), the difference of the
    final accuracy to the baseline paired by seed with its interval, p-value and verdict, and
    the time per epoch relative to the baseline (median, first epochs left out).

    Args:
        ab: from :func:`load_ablation`.
        confidence: confidence level of every interval and of the verdicts (default 0.95).
    """
    def measured(runs: list[Run]) -> list[Run]:
        return [r for r in runs if r.status != FAILED]

    by_variant = {v: [r for r in ab.runs if r.variant == v] for v in ab.variants}
    base_runs = by_variant.get(ab.baseline or "", [])
    base_fin = [r for r in base_runs if r.status == FINISHED]
    base_final = _by_seed(base_fin, "final", "val_acc")
    base_final_ema = _by_seed(base_fin, "final", "val_acc_ema")
    base_time, _ = _epoch_time(measured(base_runs))
    out = []
    for v, runs in by_variant.items():
        fin = [r for r in runs if r.status == FINISHED]
        final = _by_seed(fin, "final", "val_acc")
        final_ema = _by_seed(fin, "final", "val_acc_ema")
        has_ema = any("val_acc_ema" in m for r in runs for m in r.metrics)
        is_base = ab.baseline is not None and v == ab.baseline
        compare = ab.baseline in by_variant and not is_base
        t, with_first = _epoch_time(measured(runs))
        out.append(VariantSummary(
            variant=v, is_baseline=is_base, runs=len(runs), finished=len(fin),
            failed=sum(r.status == FAILED for r in runs),
            incomplete=sum(r.status == INCOMPLETE for r in runs),
            final=mean_ci(list(final.values()), confidence, ACC),
            best=mean_ci(list(_by_seed(fin, "best", "val_acc").values()), confidence, ACC),
            final_ema=mean_ci(list(final_ema.values()), confidence, ACC) if has_ema else None,
            best_ema=(mean_ci(list(_by_seed(fin, "best", "val_acc_ema").values()), confidence,
                              ACC)
                      if has_ema else None),
            diff=paired_difference(final, base_final, confidence) if compare else None,
            diff_ema=(paired_difference(final_ema, base_final_ema, confidence)
                      if compare and has_ema and base_final_ema else None),
            epoch_time=t,
            time_ratio=t / base_time if t is not None and base_time else None,
            time_with_first=with_first,
            failures=[(r.id, _failure(r)) for r in runs if r.status == FAILED]))
    return out


def _failure(r: Run) -> str:
    where = f" in epoch {r.failed_epoch}" if r.failed_epoch is not None else ""
    kind = f"{r.error_type}: " if r.error_type else ""
    return f"failed{where}: {kind}{r.error}"


# --------------------------------------------------------------------------- table


def _format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Fixed-width columns, left-aligned, with a rule under the header."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
            for r in [header, ["-" * w for w in widths], *rows]]


def _runs_cell(s: VariantSummary) -> str:
    cell = f"{s.finished}/{s.runs}"
    extra = [f"{n} {what}" for n, what in ((s.failed, "failed"), (s.incomplete, "incomplete"))
             if n]
    return cell + (f" ({', '.join(extra)})" if extra else "")


def _time_cell(s: VariantSummary, baseline: bool) -> str:
    if s.epoch_time is None:
        return "-"
    mark = "*" if s.time_with_first else ""
    secs = f"{s.epoch_time:.2f}s{mark}"
    if baseline and s.time_ratio is not None:
        return f"{s.time_ratio:.2f}x ({secs})"
    return secs


def table(ab: Ablation, summary: Sequence[VariantSummary]) -> str:
    """The summary as fixed-width text: one row per variant, a legend, the failed and
    incomplete runs, and the warnings of :func:`load_ablation`.

    Args:
        ab: from :func:`load_ablation`.
        summary: from :func:`summarize` on ``ab``.
    """
    has_base = ab.baseline is not None and any(s.is_baseline for s in summary)
    has_ema = any(s.final_ema is not None for s in summary)
    conf = round(100 * summary[0].final.confidence) if summary else 95
    header = ["variant", "runs done", "final val acc %", "best val acc %"]
    if has_ema:
        header.append("final EMA acc %")
    if has_base:
        header += [f"vs {ab.baseline} (pp)", "p", "verdict"]
    header.append("time/epoch" + (" vs baseline" if has_base else ""))
    rows = []
    for s in summary:
        row = [s.variant, _runs_cell(s), s.final.format(), s.best.format()]
        if has_ema:
            row.append(s.final_ema.format() if s.final_ema is not None else "-")
        if has_base:
            if s.is_baseline:
                row += ["(baseline)", "", ""]
            elif s.diff is not None:
                row += [s.diff.format(), s.diff.format_p(), s.diff.verdict]
            else:
                row += ["-", "-", ""]
        row.append(_time_cell(s, has_base))
        rows.append(row)
    n = len(ab.runs)
    lines = [f"{ab.out}: {n} runs: {ab.count(FINISHED)} finished, {ab.count(FAILED)} failed, "
             f"{ab.count(INCOMPLETE)} incomplete", ""]
    lines += _format_table(header, rows)
    lines += ["", f"final/best val acc: mean over the finished seeds [{conf}% confidence "
                  "interval, t-distribution]; one seed has no interval."]
    if has_base:
        lines += [f"vs {ab.baseline}: final val acc minus the baseline's, per seed that both "
                  f"finished, mean [{conf}% CI] in percentage points;",
                  "p: paired t-test (scipy.stats.ttest_rel). verdict: better/worse when "
                  f"p < {1 - conf / 100:.2g}; with fewer than 3 common seeds: too few seeds "
                  "to conclude."]
    lines.append("time/epoch: median epoch time, each run's first epoch (warm-up) left out"
                 + ("; relative to the baseline." if has_base else "."))
    if any(s.time_with_first for s in summary):
        lines.append("*: the runs have only one epoch so far: the time includes the warm-up.")
    failed = [(r.id, _failure(r)) for r in ab.runs if r.status == FAILED]
    if failed:
        lines += ["", "Failed runs:"] + [f"  {i}: {e}" for i, e in failed]
    incomplete = [r for r in ab.runs if r.status == INCOMPLETE]
    if incomplete:
        lines += ["", "Incomplete runs (running, stopped or not started): " + ", ".join(
            f"{r.id} ({len(r.metrics)} epochs)" if r.started else f"{r.id} (not started)"
            for r in incomplete)]
    if ab.warnings:
        lines += [""] + [f"warning: {w}" for w in ab.warnings]
    return "\n".join(lines)


# --------------------------------------------------------------------------- plots


def _figure(width: float = 7.0, height: float = 4.5) -> Any:
    """A matplotlib Figure on the Agg canvas (no pyplot, no global state)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def _png(fig: Any) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, metadata={"Software": None})
    return buf.getvalue()


def _plotted_runs(ab: Ablation, variant: str) -> tuple[list[Run], str]:
    """The runs a curve shows: the finished ones, or the incomplete ones while none finished."""
    runs = [r for r in ab.runs if r.variant == variant and r.metrics]
    fin = [r for r in runs if r.status == FINISHED]
    if fin:
        return fin, ""
    return [r for r in runs if r.status == INCOMPLETE], " (incomplete)"


def _plot_val_acc(ab: Ablation, confidence: float) -> bytes | None:
    """Validation accuracy per epoch: mean over seeds with a confidence band."""
    from matplotlib.ticker import MaxNLocator

    fig = _figure()
    ax = fig.add_subplot()
    drawn = False
    for i, v in enumerate(ab.variants):
        runs, suffix = _plotted_runs(ab, v)
        per_epoch: dict[int, list[float]] = {}
        for r in runs:
            for m in r.metrics:
                per_epoch.setdefault(m["epoch"], []).append(float(m["val_acc"]))
        if not per_epoch:
            continue
        epochs = sorted(per_epoch)
        ci = [mean_ci(per_epoch[e], confidence, ACC) for e in epochs]
        ax.plot(epochs, [100 * c.mean for c in ci], marker="o", ms=3, color=f"C{i}",
                label=f"{v}{suffix} (n={len(runs)})")
        band = [(e, c) for e, c in zip(epochs, ci) if c.low is not None and c.high is not None]
        if band:
            ax.fill_between([e for e, _ in band], [100 * (c.low or 0.0) for _, c in band],
                            [100 * (c.high or 0.0) for _, c in band], color=f"C{i}", alpha=0.2)
        drawn = True
    if not drawn:
        return None
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title(f"Validation accuracy (mean over seeds, {round(100 * confidence)}% CI band)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def _plot_final_acc(summary: Sequence[VariantSummary]) -> bytes | None:
    """Final accuracy per variant: bars at the mean with confidence-interval error bars."""
    shown = [s for s in summary if s.final.n > 0]
    if not shown:
        return None
    fig = _figure(max(4.5, 1.4 * len(shown) + 1.5))
    ax = fig.add_subplot()
    means = [100 * s.final.mean for s in shown]
    errs = [100 * (s.final.half_width or 0.0) for s in shown]
    x = list(range(len(shown)))
    ax.bar(x, means, yerr=errs, capsize=6, color=[f"C{i}" for i in x])
    ax.set_xticks(x, [f"{s.variant}\n(n={s.final.n})" for s in shown], fontsize=8)
    lo, hi = min(m - e for m, e in zip(means, errs)), max(m + e for m, e in zip(means, errs))
    ax.set_ylim(max(0.0, lo - 5), min(100.0, hi + 3))
    for i, (m, e) in enumerate(zip(means, errs)):
        ax.text(i, m + e, f"{m:.1f}", ha="center", va="bottom", fontsize=8)
    conf = round(100 * shown[0].final.confidence)
    ax.set_ylabel("final validation accuracy (%)")
    ax.set_title(f"Final accuracy (mean over finished seeds, {conf}% CI)")
    ax.grid(alpha=0.3, axis="y")
    return _png(fig)


def _schedule_epoch_means(points: Sequence[tuple[int, float | None, float]]) -> dict[int, float]:
    """Epoch means of a scheduled value known only at each epoch's end.

    ``points`` are ``(epoch, step at the epoch's end or None, value)`` sorted by epoch. Each
    epoch's mean is taken as the mean of the value at its start and at its end (exact for
    constant and linear schedules); the start of the first epoch is extrapolated linearly from
    the first two points (to step 0 when the steps are known), and clipped at 0.
    """
    out: dict[int, float] = {}
    for k, (epoch, step, end) in enumerate(points):
        if k > 0:
            start = points[k - 1][2]
        elif len(points) > 1:
            epoch2, step2, end2 = points[1]
            if epoch == 1 and step is not None and step2 is not None and step2 > step > 0:
                start = end - (end2 - end) * step / (step2 - step)  # back to step 0
            else:
                start = end - (end2 - end) / (epoch2 - epoch)  # one epoch back
            start = max(0.0, start)
        else:
            start = end
        out[epoch] = (start + end) / 2
    return out


def _plot_drop_frac(ab: Ablation) -> bytes | None:
    """Measured drop fraction per layer (``watch``: ``<layer>/drop_frac``, the mean over the
    epoch's forwards) against the scheduled ``p`` (``values``: ``<attachment>/p``, turned into
    epoch means by :func:`_schedule_epoch_means`), both averaged over seeds, per variant."""
    from matplotlib.ticker import MaxNLocator

    measured: dict[tuple[str, str], dict[int, list[float]]] = {}
    scheduled: dict[tuple[str, str], dict[int, list[float]]] = {}
    for v in ab.variants:
        for r in _plotted_runs(ab, v)[0]:
            sched_points: dict[str, list[tuple[int, float | None, float]]] = {}
            exact: dict[str, dict[int, float]] = {}  # the runner's own epoch means
            for m in r.metrics:
                for key, value in _dict(m.get("values_mean")).items():
                    x = _number(value)
                    if key.endswith(_SCHEDULED) and x is not None and math.isfinite(x):
                        exact.setdefault(key[: -len(_SCHEDULED)], {})[m["epoch"]] = x
                for key, value in _dict(m.get("watch")).items():
                    x = _number(value)
                    if key.endswith(_DROP) and x is not None and math.isfinite(x):
                        measured.setdefault((v, key[: -len(_DROP)]), {}).setdefault(
                            m["epoch"], []).append(x)
                for key, value in _dict(m.get("values")).items():
                    x = _number(value)
                    if key.endswith(_SCHEDULED) and x is not None and math.isfinite(x):
                        sched_points.setdefault(key[: -len(_SCHEDULED)], []).append(
                            (m["epoch"], _number(m.get("step")), x))
            for label, points in sched_points.items():
                means = {**_schedule_epoch_means(points), **exact.get(label, {})}
                for e, mean in means.items():
                    scheduled.setdefault((v, label), {}).setdefault(e, []).append(mean)
    if not measured:
        return None
    colors = {v: f"C{i}" for i, v in enumerate(ab.variants)}
    fig = _figure(8.0, 5.0)
    ax = fig.add_subplot()
    styles = ["-", "-.", (0, (5, 1)), (0, (1, 1))]
    for kind, series in (("measured", measured), ("scheduled p", scheduled)):
        per_variant: dict[str, int] = {}
        for (v, name), by_epoch in sorted(series.items(), key=lambda kv: (
                ab.variants.index(kv[0][0]), kv[0][1])):
            epochs = sorted(by_epoch)
            k = per_variant[v] = per_variant.get(v, -1) + 1
            ax.plot(epochs, [statistics.fmean(by_epoch[e]) for e in epochs], color=colors[v],
                    ls=styles[k % len(styles)] if kind == "measured" else "--",
                    marker="o" if kind == "measured" else None, ms=3,
                    alpha=1.0 if kind == "measured" else 0.7, label=f"{v} {name}: {kind}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("fraction dropped")
    ax.set_title("Drop fraction: measured vs scheduled (epoch means, mean over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _png(fig)


# --------------------------------------------------------------------------- files


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
    doc = {"format": _FORMAT, "config": ab.config, "config_hash": ab.config_hash,
           "versions": ab.versions, "data": ab.data, "variants": ab.variants,
           "baseline": ab.baseline, "seeds": ab.seeds,
           "counts": {s: ab.count(s) for s in (FINISHED, FAILED, INCOMPLETE)},
           "summary": [s.as_dict() for s in summary], "runs": runs, "warnings": ab.warnings}
    return (json.dumps(_plain(doc), indent=2, allow_nan=False) + "\n").encode("utf-8")


def write_report(out: Path | str, *, plots: bool = True, confidence: float = 0.95) -> Report:
    """Rebuild ``results.csv``, ``results.json`` and the plots of an ablation folder from its
    run folders, and return the table.

    ``results.csv`` has a row per epoch of every finished and incomplete run (columns
    :data:`CSV_COLUMNS`); ``results.json`` the config, versions, data, every run's status and
    metrics, and the summary with its statistics. Plots (``plots=True``): ``val_acc.png``,
    ``final_acc.png`` and, when drop fractions were watched, ``drop_frac.png``. Each file is
    replaced atomically, so this is safe while an ablation writes into the same folder.

    Args:
        out: the ablation's ``--out`` folder.
        plots: whether to draw the PNG plots (matplotlib).
        confidence: confidence level of the intervals and verdicts (default 0.95).

    Raises:
        ConfigError: not an ablation folder (see :func:`load_ablation`), or a file cannot be
            written.
    """
    folder = Path(out)
    if not (folder / "ablation.json").is_file():  # not an ablation: load_ablation says so
        return _write_report(folder, plots, confidence)
    with serialized(folder / ".report.lock"):  # one rebuild at a time: the newest wins
        return _write_report(folder, plots, confidence)


def _write_report(out: Path | str, plots: bool, confidence: float) -> Report:
    ab = load_ablation(out)
    summary = summarize(ab, confidence)
    outputs: list[tuple[Path, bytes | None]] = [
        (ab.out / "results.csv", _csv(ab)), (ab.out / "results.json", _json(ab, summary))]
    if plots:
        outputs += [(ab.out / "val_acc.png", _plot_val_acc(ab, confidence)),
                    (ab.out / "final_acc.png", _plot_final_acc(summary)),
                    (ab.out / "drop_frac.png", _plot_drop_frac(ab))]
    files = []
    for path, data in outputs:
        try:
            if data is None:  # nothing to draw: no stale plot either
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            atomic_write_bytes(path, data)
        except OSError as e:
            raise ConfigError(f"{path}: cannot write ({e.strerror or e}): make {ab.out} "
                              "writable, or copy the folder and report there") from None
        files.append(path)
    files += [r.gradcam for r in ab.runs if r.gradcam is not None]
    return Report(table(ab, summary), files, ab.count(FINISHED), ab.count(FAILED),
                  ab.count(INCOMPLETE), list(ab.warnings))

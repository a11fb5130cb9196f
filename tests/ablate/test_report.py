"""The report rebuilt from run folders written by the test: statuses, damaged files, CSV, JSON,
plots, atomic writes and a table whose statistics match a hand computation."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest

from plugdrop.ablate.errors import ConfigError, StorageError
from plugdrop.ablate.report import (CSV_COLUMNS, load_ablation, summarize, table,
                                    write_report)

SEEDS = [0, 1, 2, 3]
# Final accuracies per seed (the same numbers as test_stats.py's hand computation).
FINAL = {"baseline": [0.80, 0.82, 0.78, 0.84],
         "dropblock": [0.83, 0.84, 0.82, 0.87]}


def _epoch(epoch: int, acc: float, *, p: float | None = None, step: int = 10,
           ema: bool = False, time: float = 1.0) -> dict[str, Any]:
    rec: dict[str, Any] = {"epoch": epoch, "train_loss": 1.0 / epoch, "val_loss": 0.9 / epoch,
                           "val_acc": acc, "epoch_time": time, "images_per_s": 100.0,
                           "lr": 0.1, "step": step * epoch, "values": {}, "watch": {}}
    if ema:
        rec["val_loss_ema"] = 0.8 / epoch
        rec["val_acc_ema"] = acc + 0.01
    if p is not None:
        rec["values"] = {"DropBlock@layer3.*/p": p}
        rec["watch"] = {"layer3.0/drop_frac": p * 0.9, "layer3.0/p": p,
                        "layer3.0/act_mean": 0.5}
    return rec


def _write_run(out: Path, variant: str, seed: int, records: list[dict[str, Any]], *,
               status: str = "finished", config_hash: str | None = None) -> Path:
    """A run's folder; ``config_hash``: the ablation's (default) or another config's."""
    if config_hash is None:
        config_hash = json.loads((out / "ablation.json").read_text())["config_hash"]
    d = out / "runs" / f"{variant}__s{seed}"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"id": d.name, "variant": variant, "seed": seed,
                                            "attachments": [], "config_hash": config_hash}))
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if status == "finished":
        (d / "done.json").write_text(json.dumps({"epochs": len(records), "wall_time": 3.0,
                                                 "finished": "2026-01-01T00:00:00"}))
    elif status == "failed":
        (d / "failed.json").write_text(json.dumps({
            "error": "CUDA out of memory. Tried to allocate 2 GiB\nmore text",
            "type": "OutOfMemoryError", "epoch": len(records) + 1, "traceback": "..."}))
    return d


def _ablation(out: Path, variants: list[str], seeds: list[int],
              baseline: str | None = "baseline") -> None:
    """An ablation folder as ``plugdrop ablate`` prepares it: a real config (``baseline``
    empty, the others DropBlock), stored as the jobs and the report read it."""
    from plugdrop.ablate import config

    text = "model: resnet10t\nepochs: 3\nseeds: " + json.dumps(seeds) + "\nvariants:\n" + "".join(
        f"  {v}: []\n" if v == baseline else
        f"  {v}: [{{layers: 'layer3.*', transform: DropBlock, p: 0.1}}]\n" for v in variants)
    cfg = config.loads(text, "cfg.yaml")
    out.mkdir(parents=True, exist_ok=True)
    (out / "ablation.json").write_text(json.dumps({
        "format": 1, "config": cfg.resolved(), "config_hash": cfg.hash(),
        "variants": variants, "baseline": baseline, "seeds": seeds,
        "runs": [{"id": f"{v}__s{s}", "variant": v, "seed": s} for v in variants
                 for s in seeds],
        "versions": {"plugdrop": "0.1.0", "torch": "2.x", "timm": "1.x"},
        "data": {"name": "digits", "train": 100, "val": 50, "classes": ["0", "1"]}}))
    config.save_config(out, cfg)


def _three_epochs(final: float, p: float | None = None, ema: bool = False
                  ) -> list[dict[str, Any]]:
    # epoch 1 is slow (warm-up); the others take 1 s (baseline) or 1.5 s (dropblock)
    t = 1.5 if p is not None else 1.0
    return [_epoch(1, final - 0.10, p=None if p is None else p / 3, ema=ema, time=9.0),
            _epoch(2, final - 0.05, p=None if p is None else 2 * p / 3, ema=ema, time=t),
            _epoch(3, final, p=p, ema=ema, time=t)]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """baseline and dropblock x 4 seeds finished, plus a third variant with one finished run,
    one failed, one incomplete with a truncated last line and one with a corrupt run.json."""
    out = tmp_path / "abl"
    _ablation(out, ["baseline", "dropblock", "broken"], SEEDS)
    for v in ("baseline", "dropblock"):
        for s, acc in zip(SEEDS, FINAL[v]):
            _write_run(out, v, s, _three_epochs(acc, p=0.1 if v == "dropblock" else None))
    _write_run(out, "broken", 0, _three_epochs(0.5))
    _write_run(out, "broken", 1, _three_epochs(0.5)[:1], status="failed")
    d = _write_run(out, "broken", 2, _three_epochs(0.5)[:2], status="incomplete")
    with (d / "metrics.jsonl").open("a") as f:
        f.write('{"epoch": 3, "train_loss": 0.3, "val_')  # killed while writing
    d = _write_run(out, "broken", 3, _three_epochs(0.5))
    (d / "run.json").write_text('{"id": "broken__s3", "var')
    (d / "gradcam.png").write_bytes(b"\x89PNG fake")
    (out / "gradcam_old.png").write_bytes(b"\x89PNG stale")  # an older runner's image
    return out


def test_statuses_and_tolerance(folder: Path) -> None:
    ab = load_ablation(folder)
    status = {r.id: r.status for r in ab.runs}
    assert status["broken__s0"] == "finished"
    assert status["broken__s1"] == "failed"
    assert status["broken__s2"] == "incomplete"
    assert status["broken__s3"] == "incomplete"  # corrupt run.json
    assert [m["epoch"] for m in ab.runs[10].metrics] == [1, 2]  # truncated line skipped
    failed = ab.runs[9]
    assert failed.error == "CUDA out of memory. Tried to allocate 2 GiB"
    assert failed.error_type == "OutOfMemoryError" and failed.failed_epoch == 2
    assert len(ab.warnings) == 1
    assert "broken__s3" in ab.warnings[0] and "run.json" in ab.warnings[0]
    assert "counted as incomplete" in ab.warnings[0]
    assert (ab.count("finished"), ab.count("failed"), ab.count("incomplete")) == (9, 1, 2)


def test_summary_matches_hand_computation(folder: Path) -> None:
    s = {v.variant: v for v in summarize(load_ablation(folder))}
    base, db = s["baseline"], s["dropblock"]
    # baseline: mean 0.81, s = sqrt(0.002/3), t(0.975, 3) = 3.182446 (t-table)
    half = 3.182446 * math.sqrt(0.002 / 3) / 2
    assert base.final.mean == pytest.approx(0.81)
    assert base.final.low == pytest.approx(0.81 - half, abs=1e-6)
    assert base.best.mean == pytest.approx(0.81)  # accuracy rises every epoch
    # differences per seed: 0.03 0.02 0.04 0.03 -> mean 0.03, s = sqrt(0.0002/3)
    sd = math.sqrt(0.0002 / 3)
    assert db.diff is not None
    assert db.diff.mean == pytest.approx(0.03)
    assert db.diff.high == pytest.approx(0.03 + 3.182446 * sd / 2, abs=1e-6)
    assert db.diff.n == 4 and db.diff.verdict == "better"
    assert base.diff is None and base.verdict == "baseline"
    # time: medians of the later epochs (1.0 s and 1.5 s), the 9 s first epochs left out
    assert base.epoch_time == pytest.approx(1.0) and db.time_ratio == pytest.approx(1.5)
    broken = s["broken"]
    assert (broken.runs, broken.finished, broken.failed, broken.incomplete) == (4, 1, 1, 2)
    assert broken.final.n == 1 and broken.final.low is None
    assert broken.diff is not None and broken.diff.verdict == "too few seeds"
    assert broken.failures == [("broken__s1", "failed in epoch 2: OutOfMemoryError: CUDA out "
                                "of memory. Tried to allocate 2 GiB")]


def test_table_text(folder: Path) -> None:
    ab = load_ablation(folder)
    text = table(ab, summarize(ab))
    lines = text.splitlines()
    assert "9 finished, 1 failed, 2 incomplete" in lines[0]
    head = lines[2]
    for col in ("variant", "final val acc %", "best val acc %", "vs baseline (pp)", "p",
                "verdict", "time/epoch vs baseline"):
        assert col in head
    row = next(line for line in lines if line.startswith("dropblock"))
    assert "83.99" not in row and "84.00 [" in row and "+3.00 [" in row and "better" in row
    assert "1.50x (1.50s)" in row
    assert next(line for line in lines if line.startswith("baseline")).count("(baseline)") == 1
    broken = next(line for line in lines if line.startswith("broken"))
    assert "1/4 (1 failed, 2 incomplete)" in broken and "(1 seed, no CI)" in broken
    assert "too few seeds" in broken
    assert "paired t-test" in text and "confidence interval" in text
    assert "broken__s1: failed in epoch 2: OutOfMemoryError: CUDA out of memory" in text
    assert "broken__s2 (2 epochs)" in text
    assert text.rstrip().splitlines()[-1].startswith("warning: ")


def test_write_report_files(folder: Path) -> None:
    rep = write_report(folder)
    names = {p.name for p in rep.files}
    assert {"results.csv", "results.json", "val_acc.png", "final_acc.png",
            "drop_frac.png"} <= names
    gradcams = [p for p in rep.files if p.name == "gradcam.png"]
    assert gradcams == [folder / "runs" / "broken__s3" / "gradcam.png"]
    assert not any(p.name == "gradcam_old.png" for p in rep.files)
    for name in ("val_acc.png", "final_acc.png", "drop_frac.png"):
        assert (folder / name).read_bytes()[:4] == b"\x89PNG"
    assert (rep.finished, rep.failed, rep.incomplete) == (9, 1, 2)
    assert rep.warnings and rep.table.endswith(rep.warnings[-1])
    assert not list(folder.rglob("*.tmp"))

    with (folder / "results.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == CSV_COLUMNS
    # 8 finished runs x 3 + broken: s0 (3, finished), s2 (2, incomplete), s3 (3, incomplete);
    # the failed run's epoch is left out
    assert len(rows) - 1 == 8 * 3 + 3 + 2 + 3
    first = dict(zip(rows[0], rows[1]))
    assert first["variant"] == "baseline" and first["seed"] == "0" and first["epoch"] == "1"
    assert float(first["val_acc"]) == pytest.approx(0.70)
    assert first["val_acc_ema"] == "" and first["val_loss_ema"] == ""
    assert not any(r[0] == "broken" and r[1] == "1" for r in rows[1:])

    doc = json.loads((folder / "results.json").read_text())
    assert doc["config"]["model"] == "resnet10t" and doc["config"]["epochs"] == 3
    assert doc["versions"]["plugdrop"] == "0.1.0" and doc["data"]["name"] == "digits"
    assert doc["counts"] == {"finished": 9, "failed": 1, "incomplete": 2}
    runs = {r["id"]: r for r in doc["runs"]}
    assert runs["broken__s1"]["status"] == "failed"
    assert runs["broken__s1"]["error_type"] == "OutOfMemoryError"
    assert len(runs["baseline__s0"]["metrics"]) == 3
    summ = {s["variant"]: s for s in doc["summary"]}
    assert summ["dropblock"]["diff_final_acc"]["mean"] == pytest.approx(0.03)
    assert summ["dropblock"]["verdict"] == "better"
    assert summ["broken"]["final_acc"]["low"] is None
    assert doc["warnings"] == rep.warnings


def test_rebuild_is_identical(folder: Path) -> None:
    write_report(folder, plots=False)
    first = (folder / "results.csv").read_bytes(), (folder / "results.json").read_bytes()
    rep = write_report(folder, plots=False)
    assert ((folder / "results.csv").read_bytes(),
            (folder / "results.json").read_bytes()) == first
    assert {p.name for p in rep.files} == {"results.csv", "results.json", "report.html",
                                           "gradcam.png"}
    assert not list(folder.rglob("*.tmp"))


def test_ema_columns_and_no_drop_plot(tmp_path: Path) -> None:
    out = tmp_path / "ema"
    _ablation(out, ["baseline", "other"], [0, 1, 2])
    for v, shift in (("baseline", 0.0), ("other", 0.01)):
        for s in (0, 1, 2):
            _write_run(out, v, s, _three_epochs(0.8 + shift + 0.01 * s, ema=True))
    (out / "drop_frac.png").write_bytes(b"stale")
    rep = write_report(out)
    assert not (out / "drop_frac.png").exists()
    assert "final EMA acc %" in rep.table.splitlines()[2]
    row = next(line for line in rep.table.splitlines() if line.startswith("other"))
    # identical differences (+1 point on every seed): no NaN, p = 0, a zero-width interval
    assert "+1.00 [+1.00, +1.00]" in row and "<0.001" in row and "nan" not in rep.table
    with (out / "results.csv").open(newline="") as f:
        first = next(csv.DictReader(f))
    assert float(first["val_acc_ema"]) == pytest.approx(0.71)


def test_no_baseline_and_not_started(tmp_path: Path) -> None:
    out = tmp_path / "nb"
    _ablation(out, ["a", "b"], [0, 1], baseline=None)
    _write_run(out, "a", 0, [_epoch(1, 0.5)])
    (out / "runs" / "b__s0").mkdir()  # just created by a runner: nothing in it yet
    rep = write_report(out)
    assert "verdict" not in rep.table and "p-value" not in rep.table
    assert "b__s0 (not started)" in rep.table and "a__s1 (not started)" in rep.table
    assert "*: the runs have only one epoch" in rep.table  # the time includes the warm-up
    assert (rep.finished, rep.failed, rep.incomplete) == (1, 0, 3) and not rep.warnings
    assert {p.name for p in rep.files} == {"results.csv", "results.json", "val_acc.png",
                                           "final_acc.png", "report.html"}


@pytest.mark.parametrize("content", [None, "{not json", "[]", '{"format": 1}'])
def test_not_an_ablation_folder(tmp_path: Path, content: str | None) -> None:
    if content is not None:
        (tmp_path / "ablation.json").write_text(content)
    with pytest.raises(ConfigError, match=r"ablation\.json.*not an ablation folder"):
        load_ablation(tmp_path)
    with pytest.raises(ConfigError, match="not a folder"):
        load_ablation(tmp_path / "missing")


def test_other_damage_is_a_warning(tmp_path: Path) -> None:
    out = tmp_path / "dmg"
    _ablation(out, ["baseline"], [0, 1, 2, 3])
    d0 = _write_run(out, "baseline", 0, _three_epochs(0.8))
    (d0 / "done.json").write_text("{")  # corrupt marker
    _write_run(out, "baseline", 1, _three_epochs(0.8), config_hash="other")
    d2 = _write_run(out, "baseline", 2, _three_epochs(0.8))
    lines = (d2 / "metrics.jsonl").read_text().splitlines()
    (d2 / "metrics.jsonl").write_text("\n".join([lines[0], "garbage", *lines[1:]]) + "\n")
    d3 = _write_run(out, "baseline", 3, _three_epochs(0.8))
    (d3 / "metrics.jsonl").unlink()
    ab = load_ablation(out)
    assert [r.status for r in ab.runs] == ["incomplete", "incomplete", "finished",
                                           "incomplete"]
    text = "\n".join(ab.warnings)
    assert "done.json not valid JSON" in text and "config_hash" in text
    assert "line 2 is not an epoch record" in text and "no epoch" in text
    assert len(ab.runs[2].metrics) == 3


def test_failed_write_leaves_old_file_and_no_temp(folder: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    write_report(folder, plots=False)
    before = (folder / "results.csv").read_bytes()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("plugdrop.ablate.runs.files.os.replace", broken_replace)
    with pytest.raises(StorageError, match=r"cannot write the report \(results\.csv\): no "
                                           r"space left on the device: it needs \S+ (bytes|KB)"):
        write_report(folder, plots=False)
    assert (folder / "results.csv").read_bytes() == before
    assert not list(folder.rglob("*.tmp"))


def test_the_settings_come_from_the_stored_config_through_the_loader(folder: Path) -> None:
    """The report reads the config the runs trained with, checked by the loader: the stored
    one; without it (an older version's folder) the one ablation.json records; a stored config
    that is not the ablation's (changed by someone) is named, and ablation.json's read."""
    ab = load_ablation(folder)
    assert ab.config.decision.metric.name == "val_acc"
    assert not any(".config.json" in w for w in ab.warnings)
    stored = folder / ".config.json"
    doc = json.loads(stored.read_text())
    stored.write_text(json.dumps(dict(doc, text=doc["text"].replace("epochs: 3", "epochs: 4"))))
    ab = load_ablation(folder)
    assert ab.config.epochs == 3
    assert any(w.startswith(f"{stored}: the stored config is not the one this ablation "
                            "started with") and w.endswith("the report reads the config "
                                                           "ablation.json records")
               for w in ab.warnings), ab.warnings
    stored.unlink()
    ab = load_ablation(folder)
    assert ab.config.epochs == 3 and not any(".config.json" in w for w in ab.warnings)
    assert [s.verdict for s in summarize(ab)][:2] == ["baseline", "better"]

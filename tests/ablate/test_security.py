"""What the runner reads back from ``--out`` is data, never code (SECURITY.md).

Files of a finished ablation are replaced by pickles whose ``__reduce__`` creates a marker
file (what someone who can write a shared folder could plant): a checkpoint (in torch's zip
format and as a plain pickle), the stored config, the pickle an older version stored. Then
``--resume``, ``plugdrop report`` and ``python -m plugdrop.ablate.worker`` run: the marker must
never appear, and each says which file it refused. Symbolic links planted in the folder are
never written through. A checkpoint of an earlier plugdrop (NumPy's random state as an array)
still resumes."""

from __future__ import annotations

import csv
import io
import json
import pickle
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from _runner_helpers import SMALL, cli, reference, write  # noqa: F401 (reference: a fixture)

from plugdrop.ablate.errors import Exit
from plugdrop.ablate.runs import CheckpointRefused, load_checkpoint
from plugdrop.cli import main

#: every test trains or resumes an ablation
pytestmark = pytest.mark.slow

RUN = "dropblock__s0"
TIMING = {"epoch_time", "images_per_s"}


class Planted:
    """Unpickling this creates ``marker``: the proof that a file was executed."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def rows(out: Path) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if k not in TIMING}
            for r in csv.DictReader((out / "results.csv").open())]


@pytest.fixture(scope="module")
def ref(reference) -> Path:
    """A finished ablation (2 runs, 2 epochs), trained on one thread."""
    return reference(SMALL)


@pytest.fixture
def out(ref, tmp_path) -> Path:
    """A copy of the finished ablation whose run ``RUN`` stopped after epoch 1 (its last
    checkpoint, of epoch 2, is ahead of its metrics; the previous one holds epoch 1)."""
    copy = tmp_path / "out"
    shutil.copytree(ref, copy)
    write(tmp_path, SMALL)
    run = copy / "runs" / RUN
    (run / "done.json").unlink()
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text(lines[0])
    for name in ("results.csv", "results.json", "report.html"):
        (copy / name).unlink()
    return copy


def resume(out: Path, capsys) -> tuple[int, str]:
    """``plugdrop ablate cfg.yaml --out OUT --resume`` here, on one thread (as ``ref``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = main(["ablate", str(out.parent / "cfg.yaml"), "--out", str(out), "--resume"])
    finally:
        torch.set_num_threads(threads)
    return code, capsys.readouterr().err


def planted_checkpoint(marker: Path) -> bytes:
    buf = io.BytesIO()
    torch.save({"epoch": 1, "model": Planted(marker)}, buf)
    return buf.getvalue()


def worker(out: Path, *args: str) -> subprocess.CompletedProcess:
    return cli(str(out), RUN, *args, module="plugdrop.ablate.worker")


# --------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("form", ["torch", "pickle"])
def test_a_checkpoint_that_holds_code_is_refused_and_the_previous_one_resumes(
        ref, out, tmp_path, capsys, form):
    marker = tmp_path / "MARKER"
    ckpt = out / "runs" / RUN / "checkpoint.pt"
    ckpt.write_bytes(planted_checkpoint(marker) if form == "torch"
                     else pickle.dumps({"epoch": 1, "model": Planted(marker)}))
    code, err = resume(out, capsys)
    assert code == 0, err
    assert not marker.exists()
    warning = next(x for x in err.splitlines() if "is refused" in x)
    assert f"{ckpt} is refused" in warning and "it was not loaded" in warning
    if form == "torch":
        assert "it asks for io.open" in warning
    assert "resuming from the checkpoint of epoch 1" in warning
    assert rows(out) == rows(ref)  # epoch 2 trained again from the previous checkpoint


def test_with_every_checkpoint_refused_the_run_trains_again(ref, out, tmp_path, capsys):
    marker = tmp_path / "MARKER"
    run = out / "runs" / RUN
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):
        (run / name).write_bytes(planted_checkpoint(marker))
    code, err = resume(out, capsys)
    assert code == 0 and not marker.exists()
    assert "training it again from epoch 1" in err and "checkpoint.prev.pt is refused" in err
    assert rows(out) == rows(ref)


def test_a_checkpoint_of_an_earlier_plugdrop_still_resumes(ref, out, capsys):
    """Earlier versions stored NumPy's random state as NumPy's tuple (an array inside): the
    reader allows exactly NumPy's array types, so such a checkpoint loads and resumes."""
    run = out / "runs" / RUN
    (run / "checkpoint.pt").unlink()
    state = load_checkpoint(run / "checkpoint.prev.pt")
    for r in state["rng"]:
        n = r["numpy"]
        r["numpy"] = (n["kind"], n["keys"].numpy().view(np.uint32).copy(), n["pos"],
                      n["has_gauss"], n["gauss"])
    torch.save(state, run / "checkpoint.pt")
    (run / "checkpoint.prev.pt").unlink()
    assert isinstance(load_checkpoint(run / "checkpoint.pt")["rng"][0]["numpy"][1], np.ndarray)
    code, err = resume(out, capsys)
    assert code == 0, err
    assert "warning" not in err
    assert rows(out) == rows(ref)


def test_what_the_runner_writes_loads_as_data(ref):
    """Every checkpoint the runner wrote loads with ``weights_only=True`` and no allowance."""
    for path in sorted(ref.rglob("checkpoint*.pt")):
        state = torch.load(path, weights_only=True)
        assert {"model", "optimizer", "scheduler", "rng", "handles"} <= set(state)
    with pytest.raises(CheckpointRefused, match="asks for io.open"):
        load_checkpoint(_write(ref.parent / "planted.pt", planted_checkpoint(ref / "M")))
    assert not (ref / "M").exists()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --------------------------------------------------------------------------- the stored config


def test_the_stored_config_is_plain_data_and_no_pickle_is_left(ref):
    data = json.loads((ref / ".config.json").read_text())
    assert data["text"] == SMALL and data["config_hash"] == json.loads(
        (ref / "ablation.json").read_text())["config_hash"]
    assert not list(ref.rglob("*.pkl"))


def test_the_worker_refuses_a_config_file_that_is_a_pickle(out, tmp_path):
    marker = tmp_path / "MARKER"
    (out / ".config.json").write_bytes(pickle.dumps(Planted(marker)))
    (out / ".config.pkl").write_bytes(pickle.dumps(Planted(marker)))  # an older version's
    done = worker(out)
    assert done.returncode == 2 and not marker.exists()
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"plugdrop worker: {out / '.config.json'}: refused: not a "
                               f"config written by plugdrop")


def test_the_worker_holds_the_config_to_its_launchers_hash(out, tmp_path):
    """Someone rewrites the stored config and ablation.json consistently: a job started by a
    launcher (which passes --config-hash) refuses it; the one expected still trains."""
    want = json.loads((out / "ablation.json").read_text())["config_hash"]
    stored = json.loads((out / ".config.json").read_text())
    changed = dict(stored, text=stored["text"].replace("epochs: 2", "epochs: 3"))
    from plugdrop.ablate import config

    changed["config_hash"] = config.restore(dict(changed, config_hash=None), "x").hash()
    (out / ".config.json").write_text(json.dumps(changed))
    manifest = json.loads((out / "ablation.json").read_text())
    (out / "ablation.json").write_text(json.dumps(dict(manifest,
                                                       config_hash=changed["config_hash"])))
    done = worker(out, "--config-hash", want)
    assert done.returncode == 2
    assert "is not the one this ablation started with" in done.stderr, done.stderr
    assert str(out / ".config.json") in done.stderr
    (out / ".config.json").write_text(json.dumps(stored))
    (out / ".config.pkl").write_bytes(pickle.dumps(Planted(tmp_path / "MARKER")))
    (out / "runs" / RUN / "checkpoint.pt").write_bytes(planted_checkpoint(tmp_path / "MARKER"))
    done = worker(out, "--config-hash", want)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "MARKER").exists()
    assert "checkpoint.pt is refused" in done.stderr
    assert (out / "runs" / RUN / "done.json").exists()


def test_resume_removes_an_older_versions_pickle_without_reading_it(out, tmp_path, capsys):
    marker = tmp_path / "MARKER"
    (out / ".config.pkl").write_bytes(pickle.dumps(Planted(marker)))
    code, err = resume(out, capsys)
    assert code == 0, err
    assert not marker.exists() and not (out / ".config.pkl").exists()


def test_the_report_reads_no_pickle(out, tmp_path, capsys):
    marker = tmp_path / "MARKER"
    (out / ".config.pkl").write_bytes(pickle.dumps(Planted(marker)))
    (out / ".config.json").write_bytes(pickle.dumps(Planted(marker)))
    for path in out.rglob("checkpoint*.pt"):
        path.write_bytes(planted_checkpoint(marker))
    assert main(["report", str(out)]) == 0, capsys.readouterr().err
    assert not marker.exists() and (out / "results.csv").exists()


# --------------------------------------------------------------------------- symbolic links


def test_a_planted_link_for_a_runs_lock_is_never_followed(out, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    lock = out / "runs" / RUN / ".lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(victim)
    code, err = resume(out, capsys)
    assert code == Exit.FAULT and victim.read_text() == "precious\n"
    line = next(x for x in err.splitlines() if x.startswith("plugdrop ablate: "))
    assert f"cannot write the run's lock (.lock): it is a symbolic link" in line
    assert f"remove the link {lock}" in line and line.endswith("--resume")


def test_a_planted_link_for_a_run_folder_is_never_written_through(out, tmp_path, capsys):
    victim = tmp_path / "victim"
    shutil.move(out / "runs" / RUN, victim)
    (out / "runs" / RUN).symlink_to(victim)
    before = {p.name: p.read_bytes() for p in victim.iterdir()}
    code, err = resume(out, capsys)
    assert code == Exit.FAULT, err
    assert {p.name: p.read_bytes() for p in victim.iterdir()} == before
    assert f"cannot write the run's folder ({RUN}): it is a symbolic link" in err, err


def test_a_planted_link_for_an_appended_record_is_never_followed(out, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    path = out / "runs" / RUN / "attempts.jsonl"
    path.unlink()
    path.symlink_to(victim)
    code, err = resume(out, capsys)
    assert code == Exit.FAULT and victim.read_text() == "precious\n"
    assert "cannot write the attempts of run dropblock__s0 (attempts.jsonl): it is a symbolic " \
           "link" in err


def test_a_planted_link_for_a_replaced_record_is_replaced_not_written_through(
        ref, out, tmp_path, capsys):
    """A rename replaces the link itself: the run goes on, the link's target is untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    path = out / "runs" / RUN / "run.json"
    path.unlink()
    path.symlink_to(victim)
    code, err = resume(out, capsys)
    assert code == 0, err
    assert victim.read_text() == "precious\n" and not path.is_symlink()
    assert rows(out) == rows(ref)

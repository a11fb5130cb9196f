"""Faults of the environment, made to happen for real: a full file system (a small tmpfs when
this runs as root, which can mount one), the file-size limit (``RLIMIT_FSIZE``, anyone), a
read-only folder, checkpoints torn at several points, a torn metrics line, a run killed while
it writes a checkpoint, a data folder that vanishes in the middle of a run, data files that
change between a run and its resume, and a full disk under ``--launcher processes``.

For each: the exit status, the one line (no traceback, no run marked failed), and, once the
fault is removed, ``--resume`` ends with exactly the metrics of an uninterrupted run."""

from __future__ import annotations

import contextlib
import csv
import errno
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from _gen import image_folder, write_png
from _runner_helpers import (  # noqa: F401 (reference: a fixture)
    SMALL, Driver, env, popen, reference, reference_ablation, write)

from plugdrop.ablate.errors import Exit
from plugdrop.cli import main

CFG = SMALL.replace("epochs: 2", "epochs: 3")
TIMING = {"epoch_time", "images_per_s"}


def rows(out: Path) -> list[dict[str, str]]:
    """results.csv without the timing columns (the only ones that may differ)."""
    return [{k: v for k, v in r.items() if k not in TIMING}
            for r in csv.DictReader((out / "results.csv").open())]


def start(*args: str, fsize: int | None = None, fresh: bool = False
          ) -> subprocess.Popen | Driver:
    """``plugdrop ARGS`` in a process of its own (one torch thread), under a file-size limit
    of ``fsize`` bytes: forked warm (the limit set by ``tests/_limited.py`` before plugdrop
    runs), or where ``fresh`` (the jobs of ``--launcher processes`` must inherit the limit: a
    warm driver's jobs fork from the server, which has none) a fresh interpreter, the limit set
    before it starts."""
    if fsize is None:
        return popen(*args)
    if not fresh:
        return popen(str(fsize), *args, module="_limited")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.Popen([sys.executable, "-m", "plugdrop", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env(), preexec_fn=limit)


def finish(proc: subprocess.Popen | Driver) -> tuple[int, str]:
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def the_line(err: str) -> str:
    """The one line ``plugdrop ablate`` printed about the fault (and nothing like a
    traceback)."""
    assert "Traceback" not in err, err[-3000:]
    lines = [x for x in err.splitlines() if x.startswith("plugdrop ablate: ")
             and "warning" not in x]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def no_failed_runs(out: Path) -> None:
    assert not list(out.rglob("failed.json"))


def wait_for(path: Path, proc: subprocess.Popen | Driver, timeout: float = 240) -> None:
    t0 = time.monotonic()
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read()[-3000:] if proc.stderr else ""
        assert time.monotonic() - t0 < timeout
        time.sleep(0.002)


@contextlib.contextmanager
def small_fs(where: Path, size: str = "16m") -> Iterator[Path | None]:
    """A tmpfs of ``size`` at ``where`` when this process may mount one (root), else None."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        yield None
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True)
    if done.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(folder: Path) -> Path:
    """Write a file in ``folder`` until its file system is full; returns it."""
    path = folder / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (1 << 20, 1 << 16, 1 << 12, 1 << 9, 1):
            block = b"\0" * chunk
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, block)
    finally:
        os.close(fd)
    return path


@pytest.fixture(scope="module")
def ref(reference) -> Path:
    """The uninterrupted ablation (one thread, as the subprocesses run)."""
    return reference(CFG)


# --------------------------------------------------------------------------- a full disk


@pytest.mark.slow
def test_a_full_disk_stops_the_ablation_with_one_line_and_resume_finishes_it(tmp_path, ref):
    with small_fs(tmp_path / "fs") as fs:
        if fs is None:
            pytest.skip("mounting a small tmpfs needs root (the file-size limit test below "
                        "covers a full write without it)")
        out = fs / "out"
        cfg = write(tmp_path, CFG)
        proc = start("ablate", str(cfg), "--out", str(out))
        wait_for(out / "runs" / "baseline__s0" / "checkpoint.pt", proc)
        filler = fill(fs)  # another process filled the disk while the run trains
        code, err = finish(proc)
        assert code == Exit.FAULT
        line = the_line(err)
        assert "cannot write" in line and "no space left on the device: it needs" in line
        assert "free some space" in line and line.endswith(f"--out {out} --resume")
        no_failed_runs(out)
        assert not list(out.rglob(".*.tmp"))  # no half-written file is left
        assert not (out / "runs" / "dropblock__s0").exists()  # no further run started
        filler.unlink()
        code, err = finish(start("ablate", str(cfg), "--out", str(out), "--resume"))
        assert code == 0, err[-3000:]
        assert rows(out) == rows(ref)


@pytest.mark.slow
def test_the_file_size_limit_is_one_line_and_resume_finishes_it(tmp_path, ref):
    """RLIMIT_FSIZE (``ulimit -f``) below the size of a checkpoint: the first checkpoint
    cannot be written (EFBIG; Python ignores SIGXFSZ)."""
    out, cfg = tmp_path / "out", write(tmp_path, CFG)
    code, err = finish(start("ablate", str(cfg), "--out", str(out), fsize=16 * 1024))
    assert code == Exit.FAULT
    line = the_line(err)
    assert "the checkpoint of run baseline__s0 (checkpoint.pt)" in line
    assert "file-size limit (ulimit -f)" in line and line.endswith("--resume")
    assert "raise the file-size limit" in line
    no_failed_runs(out)
    assert not (out / "runs" / "baseline__s0" / "checkpoint.pt").exists()
    code, err = finish(start("ablate", str(cfg), "--out", str(out), "--resume"))
    assert code == 0, err[-3000:]
    assert rows(out) == rows(ref)


@pytest.mark.slow
def test_a_full_disk_under_the_processes_launcher(tmp_path, ref):
    """The jobs inherit the file-size limit: each exits with 74; the driver stops with the
    job's line and starts no other run."""
    out, cfg = tmp_path / "out", write(tmp_path, CFG)
    code, err = finish(start("ablate", str(cfg), "--out", str(out), "--launcher", "processes",
                             "--max-parallel", "1", fsize=16 * 1024, fresh=True))
    assert code == Exit.FAULT
    line = the_line(err)
    assert "run baseline__s0:" in line and "file-size limit (ulimit -f)" in line
    assert "--launcher processes" in line and line.endswith("--resume")
    assert not (out / "runs" / "dropblock__s0").exists()
    no_failed_runs(out)
    code, err = finish(start("ablate", str(cfg), "--out", str(out), "--resume"))
    assert code == 0, err[-3000:]
    assert rows(out) == rows(ref)


@pytest.mark.slow
def test_a_read_only_folder(tmp_path, ref):
    """An ablation resumed in a folder that became read-only (a snapshot, a remount)."""
    with small_fs(tmp_path / "fs") as fs:
        out = (fs or tmp_path) / "out"
        shutil.copytree(ref, out)
        (out / "runs" / "dropblock__s0" / "done.json").unlink()
        cfg = write(tmp_path, CFG)
        if fs is not None:  # root: permissions do not bind root, a read-only mount does
            subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
        elif os.geteuid() != 0:
            for p in [out, *out.rglob("*")]:
                p.chmod(p.stat().st_mode & ~0o222)
        else:
            pytest.skip("root without a tmpfs: nothing here can make a folder read-only")
        code, err = finish(start("ablate", str(cfg), "--out", str(out), "--resume"))
        assert code == Exit.FAULT
        line = the_line(err)
        assert ("the file system is read-only" in line or "permission denied" in line), line
        assert f"make {out}" in line and "writable, then continue with:" in line
        if fs is not None:
            subprocess.run(["mount", "-o", "remount,rw", str(fs)], check=True)
        else:
            for p in [out, *out.rglob("*")]:
                p.chmod(p.stat().st_mode | 0o200)
        code, err = finish(start("ablate", str(cfg), "--out", str(out), "--resume"))
        assert code == 0, err[-3000:]
        assert rows(out) == rows(ref)


# ------------------------------------------------------------------ torn files on resume


def _unfinished(ref: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the reference whose second run was cut off after its last checkpoint."""
    out = tmp_path / "out"
    shutil.copytree(ref, out)
    run = out / "runs" / "dropblock__s0"
    (run / "done.json").unlink()
    return out, run


@pytest.mark.slow
@pytest.mark.parametrize("keep", [0, 1, 100, 0.5, -1])
def test_a_torn_checkpoint_resumes_from_the_previous_one(tmp_path, ref, keep, capsys,
                                                         one_thread):
    out, run = _unfinished(ref, tmp_path)
    data = (run / "checkpoint.pt").read_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    (run / "checkpoint.pt").write_bytes(data[:cut])
    assert main(["ablate", str(write(tmp_path, CFG)), "--out", str(out), "--resume"]) == 0
    err = capsys.readouterr().err
    assert (f"warning: run dropblock__s0: {run / 'checkpoint.pt'} is unreadable, torn or "
            f"corrupt") in err and "resuming from the checkpoint of epoch 2" in err
    assert rows(out) == rows(ref)
    assert torch.load(run / "checkpoint.pt", weights_only=True)["epoch"] == 3
    assert (run / "checkpoint.pt.unused").read_bytes() == data[:cut]  # kept for a look


@pytest.mark.slow
def test_without_a_readable_checkpoint_the_run_starts_again(tmp_path, ref, capsys,
                                                            one_thread):
    out, run = _unfinished(ref, tmp_path)
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):
        (run / name).write_bytes((run / name).read_bytes()[:50])
    assert main(["ablate", str(write(tmp_path, CFG)), "--out", str(out), "--resume"]) == 0
    err = capsys.readouterr().err
    assert "checkpoint.prev.pt is unreadable" in err and "training it again from epoch 1" in err
    assert rows(out) == rows(ref)
    assert [a["start_epoch"] for a in _attempts(run)] == [1, 1]


def _attempts(run: Path) -> list[dict]:
    import json

    return [json.loads(x) for x in (run / "attempts.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_torn_metrics_line_is_dropped_and_written_again(tmp_path, ref, capsys, one_thread):
    """Killed while appending epoch 3's line: two whole lines and half of one; the checkpoint
    of epoch 2 in place (the order a run writes them)."""
    out, run = _unfinished(ref, tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(lines[:2]) + lines[2][:40])
    os.replace(run / "checkpoint.prev.pt", run / "checkpoint.pt")
    assert main(["ablate", str(write(tmp_path, CFG)), "--out", str(out), "--resume"]) == 0
    assert "warning" not in capsys.readouterr().err  # nothing was lost: nothing to say
    assert rows(out) == rows(ref)
    assert [a["start_epoch"] for a in _attempts(run)] == [1, 3]


@pytest.mark.slow
def test_a_checkpoint_ahead_of_its_metrics_is_passed_over(tmp_path, ref, capsys, one_thread):
    """A storage fault tore epoch 3's metrics line after its checkpoint was written: the
    checkpoint of epoch 2 is the last one whose epochs are all recorded."""
    out, run = _unfinished(ref, tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(lines[:2]) + lines[2][:40])
    assert main(["ablate", str(write(tmp_path, CFG)), "--out", str(out), "--resume"]) == 0
    err = capsys.readouterr().err
    assert "holds epoch 3 but metrics.jsonl only 2 complete epochs" in err
    assert rows(out) == rows(ref)


HEAVY = CFG.replace("model: tinynet:make", "model: tinynet:make_heavy").replace(
    "epochs: 3", "epochs: 2").replace(
    """  dropblock:
    - {layers: "layer1.*", transform: DropBlock, p: 0.1, block_size: 3}
""", "")


@pytest.mark.slow
def test_sigkill_while_a_checkpoint_is_written_keeps_the_previous_one(tmp_path):
    """A run with a 96 MB checkpoint, killed while it writes epoch 2's: epoch 1's survives
    whole, and the resumed run ends as an uninterrupted one."""
    (tmp_path / "ref").mkdir()
    ref = reference_ablation(tmp_path / "ref", HEAVY)
    out, cfg = tmp_path / "out", write(tmp_path, HEAVY)
    run = out / "runs" / "baseline__s0"
    proc = start("ablate", str(cfg), "--out", str(out))
    wait_for(run / "checkpoint.pt", proc)
    t0 = time.monotonic()
    while not list(run.glob(".checkpoint.pt.*.tmp")):  # epoch 2's write has begun
        assert proc.poll() is None and time.monotonic() - t0 < 240
        time.sleep(0.0005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert torch.load(run / "checkpoint.pt", weights_only=True)["epoch"] == 1
    code, err = finish(start("ablate", str(cfg), "--out", str(out), "--resume"))
    assert code == 0, err[-3000:]
    assert rows(out) == rows(ref)
    assert not list(run.glob(".*.tmp"))
    assert torch.load(run / "checkpoint.prev.pt", weights_only=True)["epoch"] == 1


# ------------------------------------------------------------------------------- data


IMAGES = """\
model: tinynet:make
data: {data}
image_size: 8
epochs: 3
batch_size: 16
workers: 1
seeds: [0]
device: cpu
gradcam: false
plots: false
variants:
  baseline: []
"""


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> tuple[Path, Path]:
    """An ImageFolder tree and the uninterrupted ablation on it."""
    root = tmp_path_factory.mktemp("images")
    data = image_folder(root / "data", per_class=40)
    (root / "ref").mkdir()
    return data, reference_ablation(root / "ref", IMAGES.format(data=data))


@pytest.mark.slow
def test_a_data_folder_that_vanishes_mid_run(tmp_path, images):
    data, ref = images
    out, cfg = tmp_path / "out", write(tmp_path, IMAGES.format(data=data))
    proc = start("ablate", str(cfg), "--out", str(out))
    wait_for(out / "runs" / "baseline__s0" / "checkpoint.pt", proc)
    away = data.with_name("data-away")
    os.replace(data, away)  # the mount dropped
    try:
        code, err = finish(proc)
    finally:
        os.replace(away, data)
    assert code == Exit.FAULT
    line = the_line(err)
    assert f"data: {data}/" in line and "No such file or directory while training" in line
    assert "remount it), then continue with:" in line and line.endswith("--resume")
    no_failed_runs(out)
    code, err = finish(start("ablate", str(cfg), "--out", str(out), "--resume"))
    assert code == 0, err[-3000:]
    assert rows(out) == rows(ref)


@pytest.mark.slow
def test_data_files_that_changed_are_named_on_resume(tmp_path, images, capsys):
    data, ref = images
    out = tmp_path / "out"
    shutil.copytree(ref, out)
    cfg = str(write(tmp_path, IMAGES.format(data=data)))
    added = write_png(data / "dog" / "zz-new.png", 7)
    try:
        assert main(["ablate", cfg, "--out", str(out), "--resume"]) == 2
        err = capsys.readouterr().err
        assert "its files changed since this ablation started (120 files then, 121 now, 1 " \
               "added (e.g. dog/zz-new.png))" in err and "--accept-data-change" in err
        assert err.count("\n") == 1
        assert main(["ablate", cfg, "--out", str(out), "--resume", "--accept-data-change"]) == 0
        assert "going on as --accept-data-change says" in capsys.readouterr().err
    finally:
        added.unlink()


def test_vanished_images_are_never_skipped_as_bad_ones(tmp_path):
    """``bad_images: skip`` drops damaged images; a file that is gone stops the run, in the
    main process and in a worker alike."""
    from plugdrop.ablate.data import build_datasets, make_loader, parse_data_spec
    from plugdrop.ablate.errors import DataGone

    data = image_folder(tmp_path / "data", per_class=4)
    sets = build_datasets(parse_data_spec(str(data)), image_size=8, val_fraction=0.25,
                          augment=None, model=None, bad_images="skip")
    shutil.rmtree(data / "dog")
    for workers in (0, 1):
        loader = make_loader(sets.train, batch_size=2, train=True, workers=workers, seed=0,
                             epoch=0, device=torch.device("cpu"))
        with pytest.raises(DataGone, match=r"data: .*dog/\d\.png: No such file or directory "
                                           r"while training: the data vanished"):
            list(loader)


# ---------------------------------------------------------------------------- pieces


def test_a_fault_travels_from_a_job_to_the_driver():
    """A job returns how its run ended as JSON (submitit's and Ray's return values); a fault
    keeps its message and its fix; an exit status alone gives a fault without a message."""
    from plugdrop.ablate.errors import Exit, StorageError
    from plugdrop.ablate.launch.protocol import Ending, JobEnd
    from plugdrop.ablate.outcome import Ending, RunResult

    e = StorageError("/x: cannot write the checkpoint (checkpoint.pt): the file system is "
                     "read-only", "make /x writable, then continue")
    sent = RunResult.faulted(e)
    got = RunResult.from_json(sent.to_json())
    assert got == sent and got.exit_status() == Exit.FAULT
    fault = got.as_fault()
    assert fault is not None and (str(fault), fault.fix) == (str(e), e.fix)
    end = JobEnd.of(got)
    assert end.status is Ending.FAULT and end.fault is not None and str(end.fault) == str(e)
    assert RunResult.from_json(RunResult.finished().to_json()).as_fault() is None
    for junk in ("finished", "fault: {}", None, b"\x80", '{"status": "nope"}', "[]", 3):
        assert RunResult.from_json(junk) is None, junk
    plain = RunResult.from_exit(Exit.FAULT, "incomplete")  # an exit status alone
    assert plain.status is Ending.FAULT and "fault of the environment" in str(plain.as_fault())


def test_a_run_result_says_its_exit_status_and_reads_one_back():
    from plugdrop.ablate.errors import Exit
    from plugdrop.ablate.launch.protocol import Ending, JobEnd
    from plugdrop.ablate.outcome import Ending, RunResult

    assert [r.exit_status() for r in (RunResult.finished(), RunResult.failed("boom"),
                                      RunResult.busy(), RunResult.stopped(10),
                                      RunResult.stopped())] == [0, 1, 75, 138, 143]
    assert RunResult.from_exit(1, "failed") == RunResult(Ending.FAILED)
    assert RunResult.from_exit(143, "finished") == RunResult.finished()  # the folder decides
    assert RunResult.from_exit(Exit.BUSY, "incomplete") == RunResult.busy()
    assert RunResult.from_exit(130, "incomplete") == RunResult.stopped(2)
    assert RunResult.from_exit(Exit.MISTAKE, "incomplete") == RunResult.stopped()
    assert JobEnd.of(RunResult.stopped(15)) == JobEnd(Ending.ENDED)
    assert JobEnd.of(RunResult.failed("boom")) == JobEnd(Ending.FAILED, "boom")
    assert RunResult.from_json(RunResult.stopped(12).to_json()) == RunResult.stopped(12)


def test_the_writer_names_the_room_it_needed(tmp_path):
    from plugdrop.ablate.runs import storage_error

    e = storage_error(OSError(errno.ENOSPC, "No space left on device"),
                      tmp_path / "runs" / "a__s0" / "checkpoint.pt", "the checkpoint", 3 << 20)
    assert str(e).startswith(f"{tmp_path / 'runs' / 'a__s0'}: cannot write the checkpoint "
                             f"(checkpoint.pt): no space left on the device: it needs 3.0 MB, ")
    assert str(e).endswith(" free") and e.fix.startswith("free some space")
    quota = storage_error(OSError(errno.EDQUOT, "Disk quota exceeded"), tmp_path / "f", "x", 10)
    assert "the disk quota is used up: it needs 10 bytes" in str(quota)
    assert quota.fix.startswith("free some of your quota")
    big = storage_error(OSError(errno.EFBIG, "File too large"), tmp_path / "f", "x", 10)
    assert "file-size limit (ulimit -f)" in str(big) and big.fix.startswith("raise the file-size")


def test_check_room_says_when_a_folder_cannot_take_a_checkpoint(tmp_path):
    """What the driver asks before it submits again a run whose job died without a word."""
    from plugdrop.ablate.errors import StorageError
    from plugdrop.ablate.runs import check_room

    check_room(tmp_path, 1024, "the checkpoint of run a__s0")  # room: nothing raised
    assert not list(tmp_path.iterdir())  # and nothing left behind
    with pytest.raises(StorageError, match=r"no space left on the device: it needs 1024\.0 TB"):
        check_room(tmp_path, 1 << 50, "the checkpoint of run a__s0")


def test_a_checkpoint_is_loaded_back_once_per_kind_of_state_and_always_compared(
        tmp_path, monkeypatch):
    """Writing verifies: the bytes read back must equal those written (every time), and the
    state must load as data (the first time this process writes its kinds of objects; a
    later state of the same kinds pickles to the same Python names and loads alike). A new
    kind of object is loaded again, and one that would need code is refused as our bug."""
    import datetime as _dt

    from plugdrop.ablate.errors import StorageError
    from plugdrop.ablate.runs import files

    loads: list[Path] = []
    real = files.loads_checkpoint
    monkeypatch.setattr(files, "loads_checkpoint",
                        lambda data, where: loads.append(where) or real(data, where))
    monkeypatch.setattr(files, "_LOADED_KINDS", set())
    model = torch.nn.Linear(3, 2)
    state = {"epoch": 1, "model": model.state_dict(), "rng": torch.get_rng_state(),
             "position": {"batches": 3, "loss_sum": 0.5, "value_sums": {}}}
    path = tmp_path / "checkpoint.pt"
    files.write_checkpoint(path, state)
    assert len(loads) == 1
    for epoch in (2, 3):  # new values, the same kinds: compared, not loaded again
        files.write_checkpoint(path, {**state, "epoch": epoch,
                                      "model": torch.nn.Linear(3, 2).state_dict()})
    assert len(loads) == 1 and torch.load(path, weights_only=True)["epoch"] == 3
    files.write_checkpoint(path, {**state, "half": torch.zeros(2, dtype=torch.float16)})
    assert len(loads) == 2  # a new dtype: another storage class in the pickle
    files.write_checkpoint(path, {**state, "ema": None})
    assert len(loads) == 3  # a new kind: None
    with pytest.raises(TypeError, match=r"holds more than tensors and plain data .*a bug of "
                                        r"plugdrop"):
        files.write_checkpoint(path, {**state, "odd": _dt.date(2026, 1, 1)})  # code builds it
    assert len(loads) == 4 and torch.load(path, weights_only=True)["epoch"] == 1  # intact

    # the comparison still runs every time: a storage that garbles a byte is caught
    real_tmp = files._write_tmp

    def garbling(target, data, what):
        tmp = real_tmp(target, data, what)
        raw = bytearray(Path(tmp).read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        Path(tmp).write_bytes(bytes(raw))
        return tmp

    monkeypatch.setattr(files, "_write_tmp", garbling)
    with pytest.raises(StorageError, match="reads back .* differently"):
        files.write_checkpoint(path, state)
    assert len(loads) == 4

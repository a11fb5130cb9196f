"""Train exactly one run of a prepared ablation folder: what each launcher job executes.

::

    python -m plugdrop.ablate.worker OUT RUN_ID
    torchrun --standalone --nproc_per_node 4 -m plugdrop.ablate.worker OUT RUN_ID

``plugdrop ablate`` (any launcher, any shard) writes ``OUT/ablation.json`` and the validated
config next to it (``OUT/.config.pkl``); a worker reads them, takes the run's lock (a second
worker for the same run exits at once), resumes from the run's last epoch checkpoint when there
is one, and writes the run folder exactly as the local runner does. Every start is recorded in
``runs/<id>/attempts.jsonl`` (``{"attempt", "start_epoch", "launcher", "host", "pid",
"started"}``), so a requeued or retried run shows where it resumed.

Exit status: 0 finished (or finished already), 1 failed, 2 a mistake (one line), 75 another
process trains this run now, 128 + signal when SIGINT / SIGTERM stopped it.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import socket
import subprocess
import sys
import traceback
from pathlib import Path

import torch

from . import runs
from .config import AblationConfig
from .errors import ConfigError

CONFIG_FILE = ".config.pkl"

#: :func:`run_one`'s results.
FINISHED, FAILED, BUSY, STOPPED = "finished", "failed", "busy", "stopped"

_EXIT = {FINISHED: 0, FAILED: 1, BUSY: 75}


def save_config(out: Path, cfg: AblationConfig) -> None:
    """Store the validated config for the workers (atomically, next to ``ablation.json``)."""
    runs.atomic_write_bytes(out / CONFIG_FILE, pickle.dumps(cfg))


def load_config(out: Path) -> AblationConfig:
    """The config that ``plugdrop ablate`` stored in ``out``.

    Raises:
        ConfigError: ``out`` is no prepared ablation folder, or its config changed since.
    """
    try:
        manifest = json.loads((out / "ablation.json").read_text())
        cfg = pickle.loads((out / CONFIG_FILE).read_bytes())
    except (OSError, ValueError, pickle.UnpicklingError, AttributeError, ImportError) as e:
        raise ConfigError(f"{out}: no ablation prepared by plugdrop ablate here ({e}); start "
                          f"it with plugdrop ablate CONFIG --out {out}") from None
    if not isinstance(cfg, AblationConfig) or cfg.hash() != manifest.get("config_hash"):
        raise ConfigError(f"{out}/{CONFIG_FILE}: does not belong to {out}/ablation.json; "
                          f"run plugdrop ablate CONFIG --out {out} --resume again")
    return cfg


def find_run(cfg: AblationConfig, out: Path, run_id: str) -> runs.RunDir:
    """The folder of run ``run_id`` (``<variant>__s<seed>``)."""
    for v, s in cfg.runs():
        if runs.run_id(v, s) == run_id:
            return runs.RunDir(out, v, s)
    known = ", ".join(runs.run_id(v, s) for v, s in cfg.runs()[:6])
    raise ConfigError(f"{out}: no run {run_id!r} in this ablation (runs: {known}"
                      f"{', ...' if len(cfg.runs()) > 6 else ''})")


def checkpoint_epoch(rd: runs.RunDir) -> int:
    """The last epoch in the run's checkpoint (0 when there is none)."""
    if not rd.checkpoint.exists():
        return 0
    try:
        state = torch.load(rd.checkpoint, map_location="cpu", weights_only=False)
        return int(state.get("epoch", 0))
    except Exception:  # a damaged checkpoint: the trainer will report it
        return 0


def _record_attempt(rd: runs.RunDir, start_epoch: int, launcher: str) -> None:
    path = rd.path / "attempts.jsonl"
    n = len(path.read_text().splitlines()) if path.exists() else 0
    rec = {"attempt": n + 1, "start_epoch": start_epoch, "launcher": launcher,
           "host": socket.gethostname(), "pid": os.getpid(), "started": runs.now()}
    rd.path.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")
        f.flush()
        os.fsync(f.fileno())


def run_one(out: Path, run_id: str, *, launcher: str = "worker", threads: int | None = None,
            handle_signals: bool = True) -> str:
    """Train (or resume) one run of the ablation in ``out`` in this process (or, under
    torchrun, in all of its processes).

    Args:
        out: the ablation folder (prepared by ``plugdrop ablate``).
        run_id: ``<variant>__s<seed>``.
        launcher: recorded in ``attempts.jsonl``.
        threads: ``torch.set_num_threads`` for this run (the CPUs it was given).
        handle_signals: stop cleanly at a step boundary on SIGINT / SIGTERM (not under
            submitit, which handles preemption itself).

    Returns:
        ``"finished"``, ``"failed"``, ``"busy"`` (another process trains it) or ``"stopped"``.

    Raises:
        ConfigError: a user mistake (no such folder or run, data missing on this machine).
    """
    from .progress import Progress
    from .runner import _current_epoch, agree, load_data, on_rank0, train_run, workers_for
    from .train import StopFlag, Stopped, resolve_device, setup_distributed

    if threads:
        torch.set_num_threads(threads)
    out = Path(out)
    cfg = load_config(out)
    rd = find_run(cfg, out, run_id)
    d = setup_distributed(resolve_device(cfg.device, cfg.loc("device")))
    lock = runs.RunLock(rd)

    def claim() -> str:
        if rd.status == "finished":
            return FINISHED
        if not lock.try_acquire():
            return BUSY
        if rd.status == "finished":
            lock.release()
            return FINISHED
        _record_attempt(rd, checkpoint_epoch(rd) + 1, launcher)
        return "go"

    state = on_rank0(d, claim)
    if state != "go":
        return state
    stop = StopFlag()
    if handle_signals:
        stop.install()
    try:
        data = agree(d, lambda: load_data(cfg))
        train_run(cfg, rd, data, d, workers_for(cfg, data), True, stop,
                  Progress(1, d.main, tty=False))
        return FINISHED
    except Stopped:
        return STOPPED
    except ConfigError as e:  # e.g. the data is not readable on this node: the driver shows it
        if d.main:
            rd.failed(e, _current_epoch(rd), "")
        raise
    except Exception as e:  # recorded like the local runner does
        if d.main:
            rd.failed(e, _current_epoch(rd), traceback.format_exc())
        print(f"plugdrop worker: run {run_id} failed: {type(e).__name__}: "
              f"{' '.join(str(e).split())[:300]}", file=sys.stderr, flush=True)
        return FAILED
    finally:
        stop.restore()
        if d.main:
            lock.release()


def run_job(out: Path, run_id: str, *, nproc: int = 1, launcher: str = "worker",
            threads: int | None = None, handle_signals: bool = True) -> str:
    """What a launcher's job runs: :func:`run_one` here, or under ``torchrun`` with ``nproc``
    processes when the run is itself data-parallel; returns the run's status afterwards."""
    if nproc <= 1:
        return run_one(out, run_id, launcher=launcher, threads=threads,
                       handle_signals=handle_signals)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", "-m", "plugdrop.ablate.worker", str(out), run_id,
           "--launcher", launcher]
    if threads:
        cmd += ["--threads", str(max(1, threads // nproc))]
    proc = subprocess.run(cmd, check=False)
    cfg = load_config(Path(out))
    status = find_run(cfg, Path(out), run_id).status
    if status in (FINISHED, FAILED):
        return status
    return BUSY if proc.returncode == 75 else STOPPED


def main(argv: list[str] | None = None) -> int:
    """``python -m plugdrop.ablate.worker OUT RUN_ID``; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m plugdrop.ablate.worker",
                                description="train one run of a prepared plugdrop ablation")
    p.add_argument("out", help="the ablation folder (the --out of plugdrop ablate)")
    p.add_argument("run_id", help="the run, <variant>__s<seed> (plugdrop ablate CONFIG --list)")
    p.add_argument("--launcher", default="worker", help="recorded in attempts.jsonl")
    p.add_argument("--threads", type=int, help="torch threads for this run")
    args = p.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    try:
        status = run_one(Path(args.out), args.run_id, launcher=args.launcher,
                         threads=args.threads)
    except ConfigError as e:
        if rank == 0:
            print(f"plugdrop worker: {e}", file=sys.stderr, flush=True)
        return 2
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    return _EXIT.get(status, 128 + 15)


if __name__ == "__main__":
    sys.exit(main())

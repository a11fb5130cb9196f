"""Train exactly one run of a prepared ablation folder: what each launcher's job executes.

::

    python -m plugdrop.ablate.worker OUT RUN_ID
    torchrun --standalone --nproc_per_node 4 -m plugdrop.ablate.worker OUT RUN_ID

``plugdrop ablate`` (any launcher, any shard) writes ``OUT/ablation.json`` and the validated
config next to it as plain data (``OUT/.config.json``: its YAML text and overrides). A job its
launcher hands the config object to (forked warm by ``--launcher processes``, a Ray task, a
submitit job: :func:`job_main`, :func:`execute_job` with ``cfg``) trains on it without reading
the text again; ``python -m plugdrop.ablate.worker`` reads it back through the loader's checks.
Either way the config is held to the hash its launcher gave (``--config-hash``: a file in
``OUT`` cannot change what runs, a ``program:`` and the folder it runs in included), and the run
is executed (:func:`plugdrop.ablate.execute.execute`: its lock, ``attempts.jsonl``, the resume
from its last checkpoint, or a program started under the run contract), writing the run folder
exactly as the local launcher does.

Exit status (:class:`~plugdrop.ablate.errors.Exit`): 0 finished (or finished already), 1
failed, 2 a mistake (one line), 74 a fault of the environment (a full disk, data that vanished:
one line; the run is not marked failed), 75 another process trains this run now, 128 + signal
when SIGINT, SIGTERM, SIGUSR1 or SIGUSR2 stopped it (at a step boundary, with a checkpoint
there). A job that runs :func:`execute_job` in its own process (submitit, Ray) returns the
:class:`~plugdrop.ablate.outcome.RunResult` as JSON instead.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

from . import runs
from .config import AblationConfig, load_stored
from .errors import ConfigError, Exit, Fault
from .execute import execute
from .outcome import Ending, RunResult
from .programs import program_of
from .progress import Progress
from .train import SIGNALS, StopFlag, Stopped, resolve_device, setup_distributed

__all__ = ["execute_here", "execute_job", "find_run", "job_command", "job_main", "main",
           "status_after"]


def find_run(cfg: AblationConfig, out: Path, run_id: str) -> runs.RunDir:
    """The folder of run ``run_id`` (``<variant>__s<seed>``)."""
    for v, s in cfg.runs():
        if runs.run_id(v, s) == run_id:
            return runs.RunDir(out, v, s)
    known = ", ".join(runs.run_id(v, s) for v, s in cfg.runs()[:6])
    raise ConfigError(f"{out}: no run {run_id!r} in this ablation (runs: {known}"
                      f"{', ...' if len(cfg.runs()) > 6 else ''})")


def _config(out: Path, config_hash: str | None, cfg: AblationConfig | None) -> AblationConfig:
    """The config a job trains under: the one its launcher handed it (held to the hash it
    gave), else the one stored in ``out``, read back through the loader's checks."""
    if cfg is None:
        return load_stored(out, config_hash)
    if config_hash is not None and cfg.hash() != config_hash:
        raise ConfigError(f"{out}: the config handed to this job is not the ablation's (hash "
                          f"{cfg.hash()}, expected {config_hash})")
    return cfg


def execute_here(out: Path, run_id: str, *, launcher: str = "worker", threads: int | None = None,
            handle_signals: bool = True, config_hash: str | None = None,
            cfg: AblationConfig | None = None) -> RunResult:
    """Train (or resume) one run of the ablation in ``out`` in this process (or, under
    torchrun, in all of its processes).

    Args:
        out: the ablation folder (prepared by ``plugdrop ablate``).
        run_id: ``<variant>__s<seed>``.
        launcher: recorded in ``attempts.jsonl``.
        threads: ``torch.set_num_threads`` for this run (the CPUs it was given).
        handle_signals: stop at the next step boundary, with a checkpoint there, on SIGINT,
            SIGTERM, SIGUSR1 or SIGUSR2 (a submitit job then hands the signal on to
            submitit's own handler, which requeues it).
        config_hash: the hash the stored config must have (the launcher's word, which a
            file in ``out`` cannot change); default: the one ``ablation.json`` records.
        cfg: the config itself, when the launcher hands it over (a job forked warm, a Ray
            task, a submitit job): not read back from the folder then.

    Returns:
        finished, failed, busy (another process trains it), stopped by a signal
        (checkpointed), or a fault of the environment (a full disk, data that vanished; the
        message is also printed, the run is not marked failed).

    Raises:
        ConfigError: a user mistake (no such folder or run, data missing on this machine);
            recorded in the run's ``failed.json`` when the run was reached.
    """
    if threads:
        torch.set_num_threads(threads)
    out = Path(out)
    cfg = _config(out, config_hash, cfg)
    rd = find_run(cfg, out, run_id)
    d = setup_distributed(resolve_device(cfg.device, cfg.loc("device")))
    stop = StopFlag()
    if handle_signals:
        stop.install()
    try:
        result = execute(cfg, rd, d, program_of(cfg), stop=stop,
                         progress=Progress(1, d.main, tty=False), launcher=launcher, out=out)
    except Stopped as e:  # checkpointed at the step it reached
        return RunResult.stopped(e.signum)
    except Fault as e:
        if d.main:
            _say(f"plugdrop worker: run {run_id}: {e}; {e.fix}")
        return RunResult.faulted(e)
    except ConfigError as e:  # e.g. the data is not readable on this node: the driver shows it
        if d.main:
            rd.failed(e, rd.current_epoch(), "")
        raise
    finally:
        stop.restore()
    if result.status is Ending.FAILED:
        _say(f"plugdrop worker: run {run_id} failed: {result.error}")
    return result


def _say(line: str) -> None:
    """A line on stderr; a log on a full disk may refuse it (the driver tells the user)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


def job_command(out: Path, run_id: str, *, nproc: int, launcher: str,
                threads: int | None, config_hash: str | None = None) -> list[str]:
    """The command that trains run ``run_id`` in its own process(es): this module, under
    torchrun with ``nproc`` processes when the run is itself data-parallel."""
    worker = ["-m", "plugdrop.ablate.worker", str(out), run_id, "--launcher", launcher]
    if config_hash:
        worker += ["--config-hash", config_hash]
    if nproc <= 1:
        return [sys.executable, *worker] + (["--threads", str(threads)] if threads else [])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", *worker]
    return cmd + (["--threads", str(max(1, threads // nproc))] if threads else [])


def execute_job(out: Path, run_id: str, *, nproc: int = 1, launcher: str = "worker",
            threads: int | None = None, handle_signals: bool = True,
            config_hash: str | None = None, cfg: AblationConfig | None = None) -> RunResult:
    """What a launcher's job runs: :func:`execute_here` (on ``cfg`` when the launcher handed it
    over), or under ``torchrun`` with ``nproc`` processes when the run is itself
    data-parallel (its fresh processes read the stored config); returns how the run ended."""
    if nproc <= 1:
        return execute_here(out, run_id, launcher=launcher, threads=threads,
                       handle_signals=handle_signals, config_hash=config_hash, cfg=cfg)
    proc = subprocess.Popen(job_command(Path(out), run_id, nproc=nproc, launcher=launcher,
                                        threads=threads, config_hash=config_hash))
    got: list[int] = []

    def forward(signum: int, frame: object) -> None:  # torchrun stops its ranks on SIGTERM
        got.append(signum)
        proc.send_signal(signal.SIGTERM)

    old = {}
    if handle_signals:
        for s in SIGNALS:
            try:
                old[s] = signal.signal(s, forward)
            except ValueError:  # not the main thread
                pass
    try:
        code = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    result = status_after(Path(out), run_id, code, config_hash, cfg)
    if got and result.status is Ending.STOPPED:
        return RunResult.stopped(got[0])
    return result


def status_after(out: Path, run_id: str, returncode: int, config_hash: str | None = None,
                 cfg: AblationConfig | None = None) -> RunResult:
    """How a run ended after a worker process exited with ``returncode``: what its folder
    says when it finished or failed, else what the exit status says
    (:meth:`~plugdrop.ablate.outcome.RunResult.from_exit`)."""
    folder = find_run(_config(out, config_hash, cfg), out, run_id).status
    return RunResult.from_exit(returncode, folder)


def main(argv: list[str] | None = None) -> int:
    """``python -m plugdrop.ablate.worker OUT RUN_ID``; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m plugdrop.ablate.worker",
                                description="train one run of a prepared plugdrop ablation")
    p.add_argument("out", help="the ablation folder (the --out of plugdrop ablate)")
    p.add_argument("run_id", help="the run, <variant>__s<seed> (plugdrop ablate CONFIG --list)")
    p.add_argument("--launcher", default="worker", help="recorded in attempts.jsonl")
    p.add_argument("--threads", type=int, help="torch threads for this run")
    p.add_argument("--config-hash", help="the hash the ablation's config must have (what "
                                         "plugdrop ablate gives its jobs; default: the one "
                                         "OUT/ablation.json records)")
    args = p.parse_args(argv)
    return job_main(Path(args.out), args.run_id, launcher=args.launcher, threads=args.threads,
                    config_hash=args.config_hash)


def job_main(out: Path, run_id: str, *, launcher: str = "worker", threads: int | None = None,
             config_hash: str | None = None, cfg: AblationConfig | None = None) -> int:
    """A job's process: :func:`execute_here` and its exit status (a mistake or a fault: one line
    on stderr, on rank 0); what ``python -m plugdrop.ablate.worker`` runs, and a job forked
    warm with its config handed over (``cfg``)."""
    rank = int(os.environ.get("RANK", "0"))
    try:
        result = execute_here(out, run_id, launcher=launcher, threads=threads,
                         config_hash=config_hash, cfg=cfg)
        import torch.distributed as dist

        if dist.is_initialized():  # every rank done before the group goes: a rank whose
            dist.barrier()  # peers closed their connections first may abort in gloo
    except ConfigError as e:
        if rank == 0:
            _say(f"plugdrop worker: {e}")
        return Exit.MISTAKE
    except Fault as e:  # met before or after the run (the config, its failure record)
        if rank == 0:
            _say(f"plugdrop worker: {e}")
        return Exit.FAULT
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    return result.exit_status()


if __name__ == "__main__":
    status = main()
    import gc

    gc.freeze()  # the process ends: no last collection over torch's objects (a second or more)
    sys.exit(status)

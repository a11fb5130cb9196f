"""The ablation: check everything (a dry step per variant), prepare the output folder, then hand
every run that is not finished yet to a launcher (:mod:`.launch`; here, one after another, by
default).

Rank 0 owns the output folder (lock, markers, metrics, checkpoints, report); under torchrun
every rank trains every run and reads checkpoints to resume.
"""

from __future__ import annotations

import importlib.metadata
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from . import config, runs
from .config import AblationConfig
from .data import DataSets
from .errors import ConfigError, Fault
from .launch import LaunchContext, LaunchOptions, Launcher, Outcome, drive, make_launcher
from .launch.shard import check_fresh, select
from .programs import Program, program_of
from .progress import Progress
from .results import decision_values, load_ablation
from .decide import Design, Replay, design_of
from .train import Dist, on_rank0

__all__ = ["Outcome", "resume_command", "run_ablation", "versions"]


def versions() -> dict[str, str]:
    """The versions of Python and of the packages a result depends on."""
    out = {"python": sys.version.split()[0], "torch": torch.__version__}
    for name in ("plugdrop", "timm", "torchvision", "numpy"):
        try:  # a module not imported (a program's ablation) is not imported for its version
            module = sys.modules.get(name)
            out[name] = (module.__version__ if module is not None
                         else importlib.metadata.version(name))
        except Exception:  # pragma: no cover - optional
            pass
    return out


def resume_command(argv: Sequence[str], out: Path) -> str:
    """The command line that continues this ablation."""
    args = [a for a in argv if a != "--resume"]
    if "--out" not in args and not any(a.startswith("--out=") for a in args):
        args += ["--out", str(out)]
    return shlex.join(["plugdrop", *args, "--resume"])


def _manifest(cfg: AblationConfig, program: Program, d: Dist) -> dict[str, Any]:
    return {"format": runs.FORMAT, "config": cfg.resolved(), "config_hash": cfg.hash(),
            "variants": cfg.variant_names, "baseline": cfg.baseline,
            "seeds": list(cfg.seed_list),
            "runs": [{"id": runs.run_id(v, s), "variant": v, "seed": s} for v, s in cfg.runs()],
            "versions": versions(), **program.manifest(d)}


def _claim_folder(cfg: AblationConfig, out: Path, lock: runs.Lock, manifest: dict[str, Any],
                  resume: bool, shard: tuple[int, int] | None, program: Program,
                  accept_data_change: bool) -> None:
    """Lock ``out`` and write ``ablation.json`` and the config the jobs read, or refuse the
    folder (runs of another config, runs without ``--resume``, another ablation in it, data
    files that changed since it started)."""
    runs.check_out(out)
    runs.ensure_dir(out, "the ablation folder")
    lock.acquire()
    try:
        with runs.claiming(out):
            if shard is not None:
                check_fresh(out, cfg, shard, resume)
            # a folder an older plugdrop started keeps its design (its config without spending)
            manifest = dict(manifest, config=config.as_recorded(out, manifest["config"]))
            warning = runs.prepare(out, manifest, resume or shard is not None,
                                   config.unhashed(), program.files, accept_data_change)
            config.save_config(out, cfg)
    except (ConfigError, Fault):
        lock.release()
        raise
    if warning is not None:
        print(f"plugdrop ablate: warning: {warning}", file=sys.stderr, flush=True)


def run_ablation(cfg: AblationConfig, *, out: Path, resume: bool, d: Dist,
                 argv: Sequence[str], data: DataSets | None = None,
                 progress: Progress | None = None, shard: tuple[int, int] | None = None,
                 launcher: Launcher | None = None, options: LaunchOptions | None = None,
                 accept_data_change: bool = False) -> Outcome:
    """Check, then train every unfinished run of ``cfg`` into ``out``: all of them for a fixed
    design, round after round until each variant is decided for an adaptive one
    (``seeds: {min, max}``; the decisions go to ``OUT/decisions.jsonl``).

    Args:
        data: the data sets of plugdrop's trainer, when loaded already.
        shard: ``(i, n)``: train only the i-th of n shares of the runs (see
            :mod:`plugdrop.ablate.launch.shard`); shards share ``out``. Not with an adaptive
            design, which decides between rounds.
        launcher: where the runs train (:func:`plugdrop.ablate.launch.make_launcher`);
            default: here, one after another. Closed when the ablation ends.
        options: the launcher's options (retries among them).
        accept_data_change: resume even though the data folder's files changed since the
            ablation started (refused otherwise).

    Raises:
        ConfigError: a mistake in the config, data or folder (before any run trains).
        Fault: the environment failed (a full disk, data that vanished): the ablation stopped,
            no run is marked failed, ``--resume`` continues once the fault is removed.
    """
    options = options or LaunchOptions()
    launcher = launcher or make_launcher("local", options)
    try:
        if shard is not None:
            config.check_shard(cfg, shard)
        program = program_of(cfg, data)
        if resume:
            on_rank0(d, lambda: program.check_folder(out))
        program.prepare(d)  # everything a run needs, checked before any trains
        lock = runs.Lock(out, shared=shard is not None)
        manifest = _manifest(cfg, program, d)
        on_rank0(d, lambda: _claim_folder(cfg, out, lock, manifest, resume, shard,
                                          program, accept_data_change))
        try:
            return _train(cfg, out, d, program, progress, shard, launcher, options)
        finally:
            if d.main:
                lock.release()
    finally:
        launcher.close()


def _header(cfg: AblationConfig, program: Program, d: Dist, todo: int, finished: int,
            shard: tuple[int, int] | None, launcher: Launcher, what: str) -> None:
    if not d.main:
        return
    trains, each = program.headline(d)
    print(f"plugdrop ablate: {trains}, {len(cfg.variants)} variants x {what}{each}; "
          f"{todo} runs to train"
          + (f", {finished} finished already" if finished else "")
          + (f" (shard {shard[0]}/{shard[1]})" if shard else "")
          + (f" through {launcher.name}" if launcher.name != "local" else ""),
          flush=True)


def _train(cfg: AblationConfig, out: Path, d: Dist, program: Program,
           progress: Progress | None, shard: tuple[int, int] | None, launcher: Launcher,
           options: LaunchOptions) -> Outcome:
    outcome = Outcome()
    if not cfg.adaptive:
        mine = cfg.runs() if shard is None else select(cfg.runs(), *shard)
        todo = []
        for v, s in mine:
            rd = runs.RunDir(out, v, s)
            if on_rank0(d, lambda rd=rd: rd.status) == runs.FINISHED:  # type: ignore[misc]
                outcome.skipped.append(rd.id)
            else:
                todo.append(rd)
        _header(cfg, program, d, len(todo), len(outcome.skipped), shard, launcher,
                f"{len(cfg.seed_list)} seeds")
        drive(launcher, LaunchContext(cfg, out, d, program,
                                      progress or Progress(len(todo), d.main),
                                      options), todo, outcome)
        return outcome
    design = design_of(cfg, on_rank0(d, lambda: config.legacy_design(out)))
    assert design is not None  # an adaptive config has a baseline (config.check_together)
    first = True
    while True:
        rep = on_rank0(d, lambda: _replay(out, design))
        needed = [runs.RunDir(out, v, s) for v, s in rep.needed]
        if rep.complete or not needed:
            break
        _header(cfg, program, d, len(needed), 0, None, launcher,
                f"round {len(rep.rounds)}: {rep.rounds[-1]} of at most {design.plan.max} seeds")
        round_outcome = Outcome()
        drive(launcher, LaunchContext(cfg, out, d, program,
                                      progress if first and progress else
                                      Progress(len(needed), d.main), options),
              needed, round_outcome)
        first = False
        outcome.finished += round_outcome.finished
        outcome.failed += round_outcome.failed
        if round_outcome.stopped:
            outcome.stopped = round_outcome.stopped
            break
        if on_rank0(d, lambda: _replay(out, design)).needed == rep.needed:
            break  # nothing ended this round (a launcher that trains nothing): do not spin
    return outcome


def _replay(out: Path, design: Design) -> Replay:
    """The design over the finished runs of ``out``; the decisions so far written to
    ``OUT/decisions.jsonl`` (one line each, with its reason)."""
    rep = design.replay(decision_values(load_ablation(out), design.rule.metric.name))
    runs.atomic_write_bytes(out / "decisions.jsonl",
                            "".join(json.dumps(e) + "\n" for e in rep.events).encode(),
                            "the decisions")
    return rep

"""A training program of the user's as the ablation's program (``program:``): run once per
variant and seed, in its own process, under the run contract (:mod:`.contract`), and judged by
how it ended and what it logged.

Each attempt of a run writes the variant's spec file afresh (``runs/<id>/spec.yaml``: never the
file as found in the folder), creates the program's own folder (``runs/<id>/work/``), keeps its
output (``runs/<id>/logs/attempt-N.stdout`` and ``.stderr``) and records itself in
``attempts.jsonl``; ``PLUGDROP_RESUME=1`` tells the program that an earlier attempt did not
finish, and ``resume_args:`` are added to its arguments then. Its metrics are the lines it
appends to ``PLUGDROP_METRICS``, or those of ``metrics_from:`` (:mod:`.sources`), copied into
the run's ``metrics.jsonl`` when it ends; what it logs is shown while it runs (:mod:`.follow`).
With ``attach_to:``, a Python program runs under plugdrop's bootstrap
(:mod:`plugdrop.bootstrap`), which attaches the variant to the model its factory builds.
How the run ended is judged by :mod:`.judge`: ``done.json``, or ``failed.json`` with one line
saying why. A program stopped by a signal plugdrop passed it (a preemption, Ctrl-C) is started
again later, as a stopped run of plugdrop's trainer is; a run whose program completed but whose
judging failed (a metric missing) is judged again on ``--resume``, not trained again.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import string
import sys
import tempfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import runs
from ..config import AblationConfig
from ..config.schema import fingerprint, settings
from ..errors import ConfigError, one_line
from ..progress import Progress
from ..train import Dist, StopFlag, Stopped
from . import contract, dry, process
from .follow import LinesFollower, SourceFollower
from .judge import Judge, judged_before
from .sources import Source

__all__ = ["ExternalProgram", "SECTIONS", "Start"]

#: the report's sections a program's runs supply: the metrics it logged, as it logged them,
#: and what each variant attached
SECTIONS = ("logged", "attached")


@dataclass(frozen=True)
class Start:
    """An attempt of a program's run: its number (from 1), whether an earlier attempt
    started it (``PLUGDROP_RESUME=1``), and whether it only judges the run again."""

    attempt: int
    resumed: bool
    #: the run's program completed before and only its judging failed: judge it again
    rejudge: bool = False


def _attempt_records(rd: runs.RunDir) -> list[dict[str, Any]]:
    """The records of ``attempts.jsonl`` that read as JSON objects (none when unreadable)."""
    try:
        lines = rd.attempts.read_text().splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records


def _attempts(rd: runs.RunDir) -> int:
    """How many attempts ``attempts.jsonl`` records."""
    return len(_attempt_records(rd))


def _chain_start(rd: runs.RunDir) -> int:
    """The attempt the run's records start from: the last one that started over (not
    resuming; the first when none says so)."""
    first = 1
    for rec in _attempt_records(rd):
        if rec.get("resume") is False and isinstance(rec.get("attempt"), int):
            first = rec["attempt"]
    return first


def _drop_torn_line(path: Path, what: str) -> None:
    """Remove a partial last line (a program killed while writing it), so that the next line
    the program appends stands on its own."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    if data and not data.endswith(b"\n"):
        runs.atomic_write_bytes(path, data[:data.rfind(b"\n") + 1], what)


class ExternalProgram:
    """A command of the user's (``program:``) as a :class:`~.protocol.Program`."""

    name = "the program"

    def __init__(self, cfg: AblationConfig) -> None:
        if cfg.program is None:
            raise ValueError("ExternalProgram needs a config with program:")
        self.cfg = cfg
        self.program = cfg.program
        self.judge = Judge(cfg)

    # -- before any run ------------------------------------------------------------------------

    def prepare(self, d: Dist, only: Collection[str] | None = None) -> None:
        contract.check_can_start(self.cfg)
        contract.check_spec_files(self.cfg)
        if self.cfg.attach_to is not None and d.main:  # each variant on the real model
            cwd = str(self.cfg.cwd) if self.cfg.workdir != "run" else tempfile.mkdtemp(
                prefix="plugdrop-dry-work-")
            try:
                dry.say(dry.dry_start(self.cfg, cwd, self.judge.located, only))
            finally:
                if cwd != str(self.cfg.cwd):
                    shutil.rmtree(cwd, ignore_errors=True)

    def manifest(self, d: Dist) -> dict[str, Any]:
        return {"trains": self.headline(d)[0], "sections": list(SECTIONS),
                "program": {"argv": self.program.plain(), "cwd": self.cfg.cwd}}

    @property
    def files(self) -> Sequence[str]:
        return ()

    def headline(self, d: Dist) -> tuple[str, str]:
        cfg = self.cfg
        python = (f"; python is {sys.executable}"
                  if self.program.argv[0] in ("python", "python3") else "")
        attach = f"; attach_to {cfg.attach_to}" if cfg.attach_to is not None else ""
        metrics = f"; metrics_from {cfg.metrics_from}" if cfg.metrics_from is not None else ""
        return f"program {self.program} (in {cfg.cwd}{python}{attach}{metrics})", ""

    def load(self, out: Path, d: Dist) -> None:
        contract.check_can_start(self.cfg)  # on the machine that runs it

    def check_folder(self, out: Path) -> None:
        """A resumed ablation's program runs in the folder it started in: say so in one line
        when ``plugdrop ablate --resume`` runs elsewhere (the config's hash differs)."""
        try:
            old = json.loads((out / "ablation.json").read_text())
        except (OSError, ValueError):
            return
        was = old.get("program", {}).get("cwd") if isinstance(old, dict) and isinstance(
            old.get("program"), dict) else None
        resolved = old.get("config") if isinstance(old, dict) else None
        if isinstance(was, str) and was != self.cfg.cwd and isinstance(resolved, dict) \
                and fingerprint(resolved, settings()) == fingerprint(self.cfg.resolved(),
                                                                     settings()):
            raise ConfigError(f"--out {out}: its program runs in {was}, the folder the "
                              f"ablation started in, not in {self.cfg.cwd}: continue it from "
                              f"there (cd {shlex.quote(was)})")

    # -- one run -------------------------------------------------------------------------------

    def _paths(self, rd: runs.RunDir) -> contract.RunPaths:
        folder = Path(os.path.abspath(rd.path))
        return contract.RunPaths(spec=folder / "spec.yaml", run_dir=folder / "work",
                                 metrics=folder / rd.metrics.name)

    def _cwd(self, rd: runs.RunDir) -> str:
        """The folder the run's program runs in (``workdir``)."""
        return str(self._paths(rd).run_dir if self.cfg.workdir == "run" else self.cfg.cwd)

    def _values(self, rd: runs.RunDir) -> dict[str, Any]:
        """What the placeholders of a run stand for."""
        paths = self._paths(rd)
        return {"seed": rd.seed, "variant": rd.variant, "spec": str(paths.spec),
                "run_dir": str(paths.run_dir), "metrics": str(paths.metrics)}

    def _resume_args(self, rd: runs.RunDir) -> list[str] | None:
        """The arguments a resumed attempt is given (``resume_args``), or ``None`` when it is
        given none (none set, or its ``if_exists`` file is missing)."""
        values = self._values(rd)
        extra = self.cfg.resume_args
        if extra is None:
            return None
        exists = extra.if_exists
        if exists is None or Path(self._cwd(rd),
                                  string.Formatter().vformat(exists, (), values)).exists():
            return extra.render(**values)
        return None

    def _argv(self, rd: runs.RunDir, resumed: bool = False) -> list[str]:
        """The run's arguments (``resume_args`` added when it resumes)."""
        argv = self.program.render(**self._values(rd))
        if resumed:
            argv += self._resume_args(rd) or []
        return contract.argv_of(self.cfg, argv)

    def _continues(self, rd: runs.RunDir) -> bool:
        """Whether an attempt after an unfinished one continues it: given ``resume_args``
        (their file exists), or, without ``resume_args`` and ``metrics_from``, a program of the
        run contract (``PLUGDROP_RESUME=1`` tells it to resume). A script as it is, given no
        way to resume, starts over: clean."""
        if self.cfg.resume_args is not None:
            return self._resume_args(rd) is not None
        return self.cfg.metrics_from is None

    def source(self, rd: runs.RunDir) -> Source | None:
        """Where the run's program writes its metrics (``metrics_from``), or ``None``: the
        run contract's file."""
        spec = self.cfg.metrics_from
        if spec is None:
            return None
        path = None
        if spec.kind != "stdout":
            path = Path(self._cwd(rd), spec.path(**self._values(rd)))
        return Source(spec, path, rd.path / "logs", first=_chain_start(rd))

    def rejudges(self, rd: runs.RunDir) -> bool:
        return judged_before(rd, self.judge) == "rejudge"

    def begin(self, rd: runs.RunDir, launcher: str) -> Start:
        after_judging = judged_before(rd, self.judge)
        if after_judging == "rejudge":  # trained, judged otherwise now: judge it again
            return Start(_attempts(rd), True, rejudge=True)
        before = _attempts(rd)
        # trained, and judged failed under the same settings: the program changed, so the run
        # trains again from the start; what the earlier attempts left is kept beside
        fresh = before == 0 or after_judging == "retrain" or not self._continues(rd)
        if before and fresh:  # it starts over: what the earlier attempts left is set aside
            self._set_aside(rd, before)
        variant = self.cfg.variant(rd.variant)
        rd.start({"id": rd.id, "variant": rd.variant, "seed": rd.seed,
                  "attachments": [a.describe() for a in variant.attachments],
                  "grid": dict(variant.grid), "config_hash": self.cfg.hash(),
                  "program": self._argv(rd), "cwd": self._cwd(rd)}, fresh=fresh)
        if not fresh:
            _drop_torn_line(rd.metrics, f"the metrics of run {rd.id}")
        runs.append_line(rd.attempts, {"attempt": before + 1, "resume": not fresh,
                                       "launcher": launcher, "host": socket.gethostname(),
                                       "pid": os.getpid(), "started": runs.now()},
                         f"the attempts of run {rd.id}")
        return Start(before + 1, not fresh)

    def _set_aside(self, rd: runs.RunDir, attempts: int) -> None:
        """Move the program's folder of a run that trains again from the start to
        ``work.before-<attempt>`` (kept, not deleted), and with it the receipt."""
        work = self._paths(rd).run_dir
        if work.exists():
            try:
                os.replace(work, work.with_name(f"work.before-{attempts + 1}"))
            except OSError as e:
                raise runs.storage_error(e, work, f"the folder of run {rd.id}'s program") \
                    from None
        (rd.path / "attached.json").unlink(missing_ok=True)

    def train(self, rd: runs.RunDir, d: Dist, start: Any, *, stop: StopFlag,
              progress: Progress, lock: runs.RunLock) -> None:
        assert isinstance(start, Start)
        cfg = self.cfg
        paths = self._paths(rd)
        logs = rd.path / "logs"
        if start.rejudge:
            said = self._collect(rd)
            self.judge.judge(rd, start.attempt, None, logs / f"attempt-{start.attempt}.stdout",
                             logs / f"attempt-{start.attempt}.stderr", said)
            return
        runs.atomic_write_bytes(paths.spec, contract.spec_text(cfg.variant(rd.variant)),
                                f"the spec file of run {rd.id}")  # afresh, whatever was there
        runs.ensure_dir(paths.run_dir, f"the folder of run {rd.id}'s program")
        runs.no_link(paths.run_dir, f"the folder of run {rd.id}'s program")
        runs.ensure_dir(logs, f"the logs of run {rd.id}")
        runs.no_link(logs, f"the logs of run {rd.id}")
        out_log = logs / f"attempt-{start.attempt}.stdout"
        err_log = logs / f"attempt-{start.attempt}.stderr"
        env = contract.environment(os.environ, rd.id, rd.variant, rd.seed, paths, start.resumed,
                                   cfg.attach_to)
        if cfg.workdir == "run":  # modules beside the script still import
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(cfg.cwd),
                                                            env.get("PYTHONPATH")) if p)
        argv = self._argv(rd, start.resumed)
        progress.program_start(rd.variant, rd.seed, start.attempt, start.resumed)
        source = self.source(rd)
        # made before the start: what the program logs at once is seen
        follower: Any = (LinesFollower(paths.metrics, progress) if source is None
                         else SourceFollower(source, progress))
        proc = self._start(rd, argv, env, out_log, err_log, lock)
        ending = process.watch(proc, stop, cfg.run_timeout.seconds if cfg.run_timeout else None,
                               follower)
        follower(final=True)
        said = self._collect(rd)
        if ending.passed is not None:  # a stop: it runs again later, resuming
            raise Stopped(ending.passed)
        self.judge.judge(rd, start.attempt, ending, out_log, err_log, said)

    def _collect(self, rd: runs.RunDir) -> str | None:
        """Copy the records of ``metrics_from`` into the run's ``metrics.jsonl`` (what the
        judge and the report read); nothing without it. Returns why the source gave no
        record (its cause, with this run's path), or ``None``."""
        source = self.source(rd)
        if source is None:
            return None
        records, problem = source.read()
        if not records:
            return problem or f"{source} holds no record"  # the judge names it
        data = "".join(json.dumps(r) + "\n" for r in records).encode()
        runs.atomic_write_bytes(rd.metrics, data, f"the metrics of run {rd.id}")
        return None

    def _start(self, rd: runs.RunDir, argv: list[str], env: dict[str, str], out_log: Path,
               err_log: Path, lock: runs.RunLock) -> Any:
        fds = []
        try:
            for path in (out_log, err_log):
                try:
                    fds.append(runs.open_no_follow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
                except OSError as e:
                    raise runs.storage_error(e, path, f"the output of run {rd.id}") from None
            keep = [lock.file.fileno()] if lock.file is not None else []
            try:
                return process.start(argv, self._cwd(rd), env, fds[0], fds[1], keep)
            except (FileNotFoundError, PermissionError, NotADirectoryError) as e:
                raise ConfigError(f"{self.cfg.loc('program')}: program: {shlex.join(argv)} "
                                  f"cannot start on {socket.gethostname()}: "
                                  f"{e.strerror or e}") from None
            except OSError as e:
                raise self.judge.fail(rd, f"the program could not start: {one_line(e)}", None,
                                      out_log, err_log, []) from None
        finally:
            for fd in fds:
                os.close(fd)

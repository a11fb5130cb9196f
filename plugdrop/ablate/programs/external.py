"""A training program of the user's as the ablation's program (``program:``): run once per
variant and seed, in its own process, under the run contract (:mod:`.contract`), and judged by
how it ended and what it logged.

Each attempt of a run writes the variant's spec file afresh (``runs/<id>/spec.yaml``: never the
file as found in the folder), creates the program's own folder (``runs/<id>/work/``), keeps its
output (``runs/<id>/logs/attempt-N.stdout`` and ``.stderr``) and records itself in
``attempts.jsonl``; ``PLUGDROP_RESUME=1`` tells the program that an earlier attempt did not
finish. The run finished when the program exited with status 0 and its last logged value of
the decision metric is a finite number; else it failed, with one line saying why (its exit
status and the last lines of its stderr; the signal that killed it; ``run_timeout``; the metric
it did not log, naming those it did; a value that diverged), kept in ``failed.json`` with the
tail of its stderr. A program stopped by a signal plugdrop passed it (a preemption, Ctrl-C) is
started again later, as a stopped run of plugdrop's trainer is.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import runs
from ..config import AblationConfig
from ..config.schema import fingerprint, settings
from ..errors import ConfigError, one_line
from ..progress import Progress
from ..runs.records import POSITION, finite
from ..train import Dist, StopFlag, Stopped
from . import contract, process
from .protocol import RunFailed

__all__ = ["ExternalProgram", "SECTIONS", "Start"]

#: the report's sections a program's runs supply: the metrics it logged, as it logged them
SECTIONS = ("logged",)
#: how many of the last lines of its stderr a failed program's one line quotes
QUOTED_LINES = 3
#: at most so many characters of them
QUOTED_CHARS = 240


@dataclass(frozen=True)
class Start:
    """An attempt of a program's run: its number (from 1) and whether an earlier attempt
    started it (``PLUGDROP_RESUME=1``)."""

    attempt: int
    resumed: bool


class _Follower:
    """Shows the metric lines the program appends while it runs."""

    def __init__(self, path: Path, progress: Progress) -> None:
        self.path, self.progress = path, progress
        try:
            self.offset = path.stat().st_size
        except OSError:
            self.offset = 0

    def __call__(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        complete = data[:data.rfind(b"\n") + 1]
        self.offset += len(complete)
        for line in complete.decode("utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                self.progress.logged(rec)


def _attempts(rd: runs.RunDir) -> int:
    """How many attempts ``attempts.jsonl`` records."""
    try:
        lines = rd.attempts.read_text().splitlines()
    except OSError:
        return 0
    n = 0
    for line in lines:
        try:
            n += isinstance(json.loads(line), dict)
        except ValueError:
            pass
    return n


def _drop_torn_line(path: Path, what: str) -> None:
    """Remove a partial last line (a program killed while writing it), so that the next line
    the program appends stands on its own."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    if data and not data.endswith(b"\n"):
        runs.atomic_write_bytes(path, data[:data.rfind(b"\n") + 1], what)


def _quoted(lines: Sequence[str]) -> str:
    """The last lines of a program's stderr, on one line."""
    text = " | ".join(" ".join(line.split()) for line in lines[-QUOTED_LINES:])
    return text if len(text) <= QUOTED_CHARS else "..." + text[-QUOTED_CHARS:]


def _where(rec: Mapping[str, Any]) -> str:
    """``epoch 1`` or ``step 300`` (or both) of a record."""
    return ", ".join(f"{k} {rec[k]}" for k in POSITION if k in rec) or "a record"


def _exit_note(code: int) -> str:
    """What an exit status above 128 usually means (a shell's child killed by a signal)."""
    if code > 128:
        name = process.signal_name(code - 128)
        if not name.startswith("signal "):
            return f" (128 + {name}: a process it ran was killed by that signal?)"
    return ""


class ExternalProgram:
    """A command of the user's (``program:``) as a :class:`~.protocol.Program`."""

    name = "the program"

    def __init__(self, cfg: AblationConfig) -> None:
        if cfg.program is None:
            raise ValueError("ExternalProgram needs a config with program:")
        self.cfg = cfg
        self.program = cfg.program

    # -- before any run ------------------------------------------------------------------------

    def prepare(self, d: Dist) -> None:
        contract.check_can_start(self.cfg)
        contract.check_spec_files(self.cfg)

    def manifest(self, d: Dist) -> dict[str, Any]:
        return {"trains": self.headline(d)[0], "sections": list(SECTIONS),
                "program": {"argv": self.program.plain(), "cwd": self.cfg.cwd}}

    @property
    def files(self) -> Sequence[str]:
        return ()

    def headline(self, d: Dist) -> tuple[str, str]:
        return f"program {self.program} (in {self.cfg.cwd})", ""

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

    def _argv(self, rd: runs.RunDir) -> list[str]:
        paths = self._paths(rd)
        return self.program.render(seed=rd.seed, variant=rd.variant, spec=str(paths.spec),
                                   run_dir=str(paths.run_dir), metrics=str(paths.metrics))

    def begin(self, rd: runs.RunDir, launcher: str) -> Start:
        before = _attempts(rd)
        variant = self.cfg.variant(rd.variant)
        rd.start({"id": rd.id, "variant": rd.variant, "seed": rd.seed,
                  "attachments": [a.describe() for a in variant.attachments],
                  "grid": dict(variant.grid), "config_hash": self.cfg.hash(),
                  "program": self._argv(rd), "cwd": self.cfg.cwd}, fresh=before == 0)
        if before:
            _drop_torn_line(rd.metrics, f"the metrics of run {rd.id}")
        runs.append_line(rd.attempts, {"attempt": before + 1, "resume": before > 0,
                                       "launcher": launcher, "host": socket.gethostname(),
                                       "pid": os.getpid(), "started": runs.now()},
                         f"the attempts of run {rd.id}")
        return Start(before + 1, before > 0)

    def train(self, rd: runs.RunDir, d: Dist, start: Any, *, stop: StopFlag,
              progress: Progress, lock: runs.RunLock) -> None:
        assert isinstance(start, Start)
        cfg = self.cfg
        paths = self._paths(rd)
        runs.atomic_write_bytes(paths.spec, contract.spec_text(cfg.variant(rd.variant)),
                                f"the spec file of run {rd.id}")  # afresh, whatever was there
        runs.ensure_dir(paths.run_dir, f"the folder of run {rd.id}'s program")
        runs.no_link(paths.run_dir, f"the folder of run {rd.id}'s program")
        logs = rd.path / "logs"
        runs.ensure_dir(logs, f"the logs of run {rd.id}")
        runs.no_link(logs, f"the logs of run {rd.id}")
        out_log = logs / f"attempt-{start.attempt}.stdout"
        err_log = logs / f"attempt-{start.attempt}.stderr"
        env = contract.environment(os.environ, rd.id, rd.variant, rd.seed, paths, start.resumed)
        argv = self._argv(rd)
        progress.program_start(rd.variant, rd.seed, start.attempt, start.resumed)
        follower = _Follower(paths.metrics, progress)  # before the start: what it logs at once
        proc = self._start(rd, argv, env, out_log, err_log, lock)
        ending = process.watch(proc, stop, cfg.run_timeout.seconds if cfg.run_timeout else None,
                               follower)
        if ending.passed is not None:  # a stop: it runs again later, resuming
            raise Stopped(ending.passed)
        self._judge(rd, start, ending, out_log, err_log)

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
                return process.start(argv, str(self.cfg.cwd), env, fds[0], fds[1], keep)
            except (FileNotFoundError, PermissionError, NotADirectoryError) as e:
                raise ConfigError(f"{self.cfg.loc('program')}: program: {shlex.join(argv)} "
                                  f"cannot start on {socket.gethostname()}: "
                                  f"{e.strerror or e}") from None
            except OSError as e:
                raise self._fail(rd, f"the program could not start: {one_line(e)}", None,
                                 out_log, err_log, []) from None
        finally:
            for fd in fds:
                os.close(fd)

    def _judge(self, rd: runs.RunDir, start: Start, ending: process.Ending, out_log: Path,
               err_log: Path) -> None:
        """``done.json`` when the program exited with status 0 and logged a finite value of
        the decision metric; else ``failed.json`` and :class:`RunFailed`."""
        cfg = self.cfg
        stderr = process.tail(err_log)
        quoted = f"; its stderr ends: {_quoted(stderr)}" if stderr else "; its stderr is empty"

        def fail(line: str) -> RunFailed:
            return self._fail(rd, line, ending, out_log, err_log, stderr, start.attempt)

        if ending.timed_out:
            raise fail(f"the program ran longer than run_timeout {cfg.run_timeout} and was "
                       f"ended (SIGTERM, then SIGKILL after {process.GRACE_S:g}s)")
        if ending.killed_by is not None:
            hint = (" (sent by the kernel's out-of-memory killer, `kill -9` or a scheduler "
                    "ending the job: dmesg says whether it was out of memory)"
                    if ending.killed_by == 9 else "")
            raise fail(f"the program was killed by {process.signal_name(ending.killed_by)}"
                       f"{hint}{quoted if stderr else ''}")
        if ending.code != 0:
            raise fail(f"the program exited with status {ending.code}"
                       f"{_exit_note(ending.code or 0)}{quoted}")
        metric = cfg.decide_on.name
        warnings: list[str] = []
        records = runs.read_records(rd.metrics, warnings)
        value, rec = runs.last_value(records, metric)
        if value is None:
            text = next((rec[metric] for rec in reversed(records) if metric in rec), None)
            if text is not None:  # logged, but not as a number: "0.73", null, [0.7]
                raise fail(f"the program logged {metric} as {json.dumps(text)[:60]}, not a "
                           f"number; log it as one ({metric}: 0.73, not \"0.73\")")
            names = runs.logged_names(records)
            said = (f"; it logged {', '.join(names[:12])}{' ...' if len(names) > 12 else ''}"
                    if names else f"; its metrics file (PLUGDROP_METRICS, {rd.metrics}) holds "
                                  f"no record{': ' + warnings[0] if warnings else ''}")
            raise fail(f"the program exited with status 0 but logged no value of {metric} "
                       f"(decide_on){said}")
        if not finite(value):
            where = ", ".join(f"{k} {rec[k]}" for k in POSITION
                              if rec is not None and k in rec)
            raise fail(f"the run diverged: the last {metric} it logged is {value}"
                       f"{f' ({where})' if where else ''}")
        done: dict[str, Any] = {
            "wall_time": ending.seconds, "finished": runs.now(), "attempt": start.attempt,
            "decide_on": metric, "value": value, "records": len(records)}
        if rec is not None and rec is not records[-1]:  # later records hold no value of it
            done["stale"] = (f"its last {metric} was logged at {_where(rec)}, its last record "
                             f"is at {_where(records[-1])}")
        runs.atomic_write_json(rd.path / "done.json", done, f"the end of run {rd.id}")

    def _fail(self, rd: runs.RunDir, line: str, ending: process.Ending | None, out_log: Path,
              err_log: Path, stderr: list[str], attempt: int | None = None) -> RunFailed:
        """Record the failure in ``failed.json`` (the line, how the program ended, the tail
        of its stderr, where its logs are) and return the :class:`RunFailed` to raise."""
        line = one_line(line, limit=600)
        runs.atomic_write_json(rd.path / "failed.json", {
            "error": line, "type": None, "epoch": None, "traceback": "", "attempt": attempt,
            "exit_status": ending.code if ending is not None else None,
            "signal": (process.signal_name(ending.killed_by)
                       if ending is not None and ending.killed_by is not None else None),
            "timed_out": bool(ending and ending.timed_out),
            "seconds": ending.seconds if ending is not None else None,
            "stderr": stderr, "logs": {"stdout": str(out_log), "stderr": str(err_log)},
            "failed": runs.now()}, f"the failure of run {rd.id}")
        return RunFailed(line)


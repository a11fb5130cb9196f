"""The dry start of a program run as it is (``attach_to:``): before any run trains, each
distinct attachment spec of the config (the baseline's ``[]`` included) is tried against the
model the script really builds. The program starts under plugdrop's bootstrap with
``PLUGDROP_DRY_START=1`` in a folder of its own, attaches, leaves its receipt (the layers each
attachment matched, the model's class, whether its hooks ran) and stops at its first optimizer
step (:mod:`plugdrop.bootstrap`): seconds per variant, several at once.

A selector that matches nothing, an ``attach_to`` that names no model the script builds, or a
program that cannot start fails the ablation before any run trains: one line per cause, each
with the closest names (a cause every variant meets is said once). A dry start that does not
reach its first step within :data:`LIMIT_S` is left to the runs to judge, with a warning.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import runs
from ..config import AblationConfig, Variant
from ..errors import ConfigError, one_line
from . import contract, process
from .judge import exception_of

__all__ = ["DryStart", "LIMIT_S", "dry_start", "say"]

#: a dry start that has not stopped after this long (or ``run_timeout``, when shorter) is
#: ended and left unchecked
LIMIT_S = 300.0
#: dry starts running at once (at most)
AT_ONCE = 4
#: an error at a place of the config: ``SelectorError: cfg.yaml:9:3 (variant 'x'): ...``
_PLACED = re.compile(r"(?P<type>\w+: )?(?P<loc>\S+:\d+:\d+) \(variant '[^']*'\): (?P<rest>.*)")


@dataclass(frozen=True)
class DryStart:
    """What one dry start of a variant found: ``models`` (the classes attached to),
    ``attachments`` (label, layers) and ``problem`` (why it fails, one line; ``where``: its
    place in the config) or ``None``."""

    variant: str
    models: tuple[str, ...]
    attachments: tuple[tuple[str, tuple[str, ...]], ...]
    problem: str | None
    checked: bool = True
    where: str = ""

    def describe(self) -> str:
        what = "; ".join(f"{label} on {len(layers)} layer{'s' * (len(layers) != 1)} "
                         f"({', '.join(layers[:4])}{' ...' if len(layers) > 4 else ''})"
                         for label, layers in self.attachments) or "nothing (the baseline)"
        return f"variant {self.variant!r} attaches {what} to {', '.join(self.models) or '?'}"


def _distinct(cfg: AblationConfig, only: Collection[str] | None = None) -> list[Variant]:
    """The first variant of each distinct spec file (of the variants in ``only``, if given)."""
    seen: dict[bytes, Variant] = {}
    for v in cfg.variants:
        if only is None or v.name in only:
            seen.setdefault(contract.spec_text(v), v)
    return list(seen.values())


def dry_start(cfg: AblationConfig, cwd: str, located: Any = lambda line, variant: line,
              only: Collection[str] | None = None) -> list[DryStart]:
    """Dry-start the program of ``cfg`` once per distinct spec (see the module), in ``cwd``.

    Args:
        located: ``(line, variant) -> line`` with a place in a spec file as the place in the
            config (:meth:`~.judge.Judge.located`).
        only: the variants to check (those a ``--shard`` trains); ``None``: every one.

    Raises:
        ConfigError: what the dry starts found that every run of a variant would meet (one
            line per cause, :attr:`ConfigError.before`).
    """
    assert cfg.program is not None
    variants = _distinct(cfg, only)
    seed = cfg.seed_list[0] if cfg.seed_list else 0
    limit = min(LIMIT_S, cfg.run_timeout.seconds) if cfg.run_timeout else LIMIT_S
    home = Path(tempfile.mkdtemp(prefix="plugdrop-dry-"))
    started: list[tuple[Variant, Path, subprocess.Popen, float]] = []
    found: list[DryStart] = []
    try:
        todo = list(enumerate(variants))
        while todo or started:
            while todo and len(started) < AT_ONCE:
                k, v = todo.pop(0)
                folder = home / str(k)
                started.append((v, folder, _start(cfg, v, seed, folder, cwd), time.monotonic()))
            time.sleep(0.05)
            for item in list(started):
                v, folder, proc, began = item
                if proc.poll() is None and time.monotonic() - began < limit:
                    continue
                if proc.poll() is None:
                    _kill(proc)
                    found.append(DryStart(v.name, (), (), None, checked=False))
                else:
                    found.append(_read(cfg, v, folder, proc.returncode, located))
                started.remove(item)
    except BaseException:
        for _, _, proc, _ in started:
            _kill(proc)
        raise
    finally:
        shutil.rmtree(home, ignore_errors=True)
    causes: dict[tuple[str, str], list[str]] = {}
    order = {v.name: i for i, v in enumerate(cfg.variants)}
    for f in sorted(found, key=lambda f: order.get(f.variant, 0)):
        if f.problem is not None:
            causes.setdefault((f.where, f.problem), []).append(repr(f.variant))
    problems = [f"{where} (variant{'s' * (len(names) > 1)} {', '.join(names)}, dry start before "
                f"any run): {problem}" for (where, problem), names in causes.items()]
    if problems:
        error = ConfigError(problems[-1])
        error.before = tuple(problems[:-1])
        raise error
    return found


def _start(cfg: AblationConfig, v: Variant, seed: int, folder: Path, cwd: str
           ) -> subprocess.Popen:
    assert cfg.program is not None
    paths = contract.RunPaths(spec=folder / "spec.yaml", run_dir=folder / "work",
                              metrics=folder / "metrics.jsonl")
    runs.ensure_dir(paths.run_dir, f"the dry start of variant {v.name!r}")
    runs.atomic_write_bytes(paths.spec, contract.spec_text(v), "a spec file")
    env = contract.environment(os.environ, f"{v.name}__dry", v.name, seed, paths, False,
                               cfg.attach_to)
    env["PLUGDROP_DRY_START"] = "1"
    argv = contract.argv_of(cfg, cfg.program.render(
        seed=seed, variant=v.name, spec=str(paths.spec), run_dir=str(paths.run_dir),
        metrics=str(paths.metrics)))
    fds = [runs.open_no_follow(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
           for name in ("stdout", "stderr")]
    try:
        return process.start(argv, cwd, env, fds[0], fds[1])
    except OSError as e:
        raise ConfigError(f"{cfg.loc('program')}: program: it cannot start: "
                          f"{e.strerror or e}") from None
    finally:
        for fd in fds:
            os.close(fd)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _read(cfg: AblationConfig, v: Variant, folder: Path, code: int, located: Any) -> DryStart:
    """What the dry start of ``v`` left (its receipt, or how it ended)."""
    try:
        receipt = json.loads((folder / "attached.json").read_text())
    except (OSError, ValueError):
        receipt = None
    if isinstance(receipt, dict) and isinstance(receipt.get("error"), str) and code == 0:
        error = located(one_line(receipt["error"], period=False), v.name)
        m = _PLACED.fullmatch(error)  # at its place in the config: said once, first
        if m is not None:
            return DryStart(v.name, (), (), f"{m['type'] or ''}{m['rest']}", where=m["loc"])
        return DryStart(v.name, (), (), error, where=cfg.loc("attach_to"))
    if isinstance(receipt, dict) and code == 0:
        items = tuple((str(a.get("label")), tuple(map(str, a.get("layers") or [])))
                      for a in receipt.get("attachments") or [] if isinstance(a, dict))
        return DryStart(v.name, tuple(map(str, receipt.get("models") or [])), items, None)
    stderr = process.tail(folder / "stderr", lines=40)
    cause = exception_of(stderr) or next((x.strip() for x in reversed(stderr) if x.strip()),
                                         "its stderr is empty")
    how = (f"exited with status {code}" if code >= 0
           else f"was killed by {process.signal_name(-code)}")
    return DryStart(v.name, (), (), f"program: it cannot start: it {how}: "
                                    f"{located(one_line(cause, period=False), v.name)}",
                    where=cfg.loc("program"))


def say(found: list[DryStart]) -> None:
    """One line per dry start: what each variant attaches, or that it went unchecked."""
    for f in found:
        text = (f.describe() if f.checked else
                f"variant {f.variant!r}: its dry start did not reach the first optimizer step "
                f"in time; left to its runs")
        print(f"dry start: {text}", flush=True)

"""The run contract between ``plugdrop ablate`` and a training program of the user's
(``program:``): what a run's program is handed (its arguments with the placeholders filled in,
the ``PLUGDROP_*`` environment, the spec file of its variant) and the checks that it can start
at all, made before any run (and again on each job's machine). The variables are the library's
(:data:`plugdrop.run.ENV`), which the program's side reads (:func:`plugdrop.current_run`).

The spec file is YAML written in JSON's syntax (floats with a decimal point), so that
:func:`plugdrop.attach_all`, any YAML reader and any JSON reader read it alike.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plugdrop as pd

import sys

from ..config import AblationConfig, AttachTo, Variant
from ..config.program import python_target
from ..errors import ConfigError

__all__ = ["BOOTSTRAP", "BOOTSTRAP_ENV", "RunPaths", "argv_of", "check_can_start",
           "check_spec_files", "environment", "spec_item_lines", "spec_text"]

#: the module a program of ``attach_to:`` runs under (``python -m plugdrop.bootstrap``)
BOOTSTRAP = "plugdrop.bootstrap"
#: the variables the bootstrap reads (never passed on from plugdrop's own environment)
BOOTSTRAP_ENV = ("PLUGDROP_ATTACH_TO", "PLUGDROP_ATTACH_STEPS")

#: interpreters whose first argument that is not an option is the script they run
_INTERPRETER = re.compile(r"(python[0-9.]*|pypy[0-9.]*|bash|sh|zsh|dash|ksh|Rscript|julia|"
                          r"node|ruby|perl|php|lua)")
#: their options that take the next argument as a value
_WITH_VALUE = {"-W", "-X", "-o", "-O", "+o", "+O", "--check-hash-based-pycs", "-e", "-r",
               "--require", "-I", "-M"}
#: their options after which no script follows (a module, a command, stdin)
_NO_SCRIPT = {"-m", "-c", "-", "-s", "-e", "-E", "--eval", "-p", "--print"}


@dataclass(frozen=True)
class RunPaths:
    """Where one run's program reads and writes (absolute paths).

    Attributes:
        spec: the YAML file of the variant's attachments (``PLUGDROP_SPEC``).
        run_dir: the program's own folder (``PLUGDROP_RUN_DIR``).
        metrics: the JSON-lines file it appends to (``PLUGDROP_METRICS``).
    """

    spec: Path
    run_dir: Path
    metrics: Path


def environment(base: Mapping[str, str], run_id: str, variant: str, seed: int,
                paths: RunPaths, resumed: bool, attach_to: AttachTo | None = None
                ) -> dict[str, str]:
    """The program's environment: ``base`` (this process's) with the contract's variables
    (those of the bootstrap too, with ``attach_to``), and ``PYTHONUNBUFFERED=1`` unless set (so
    that its logs hold what it printed before a kill)."""
    env = {k: v for k, v in base.items() if k not in BOOTSTRAP_ENV}
    env.update({"PLUGDROP_SEED": str(seed), "PLUGDROP_VARIANT": variant,
                "PLUGDROP_SPEC": str(paths.spec), "PLUGDROP_RUN_DIR": str(paths.run_dir),
                "PLUGDROP_METRICS": str(paths.metrics),
                "PLUGDROP_RESUME": "1" if resumed else "0", "PLUGDROP_RUN_ID": run_id,
                "PLUGDROP_RECEIPT": str(paths.metrics.parent / "attached.json")})
    if attach_to is not None:
        env["PLUGDROP_ATTACH_TO"] = ",".join(attach_to.factories)
        if attach_to.steps is not None:
            env["PLUGDROP_ATTACH_STEPS"] = str(attach_to.steps)
    assert set(pd.run.ENV) <= set(env), "the contract and the library disagree"
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def spec_text(variant: Variant) -> bytes:
    """The variant's attachments as the file ``PLUGDROP_SPEC`` holds them: ``[]`` for the
    baseline, else a list of mappings (:meth:`plugdrop.AttachmentSpec.describe`)."""
    items = [pd.spec.plain(a.describe()) for a in variant.attachments]
    return (_dump(items, 0) + "\n").encode()


def _dump(value: Any, level: int) -> str:
    """JSON, indented, with every float written so that YAML 1.1 reads a float too."""
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return "{\n" + ",\n".join(f"{inner}{json.dumps(str(k))}: {_dump(v, level + 1)}"
                                  for k, v in value.items()) + f"\n{pad}}}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        return "[\n" + ",\n".join(f"{inner}{_dump(v, level + 1)}" for v in value) + f"\n{pad}]"
    if isinstance(value, float) and math.isfinite(value):
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text
    return json.dumps(value)


def spec_item_lines(variant: Variant) -> list[int]:
    """The line (from 1) of :func:`spec_text` at which each attachment of ``variant`` starts:
    what maps a place the library names in the spec file back to the user's config."""
    starts, line = [], 2
    for a in variant.attachments:
        starts.append(line)
        line += _dump(pd.spec.plain(a.describe()), 1).count("\n") + 1
    return starts


def argv_of(cfg: AblationConfig, argv: Sequence[str]) -> list[str]:
    """The arguments a run's program starts with, from ``program:`` as rendered: ``python``
    or ``python3`` as its first word is the interpreter that runs plugdrop (another one is
    named by its path or version, ``python3.11``); with ``attach_to``, the script or module
    runs under the bootstrap (``python [OPTIONS] -m plugdrop.bootstrap SCRIPT ARGS``); with
    ``workdir: run`` the script's path is made absolute."""
    out = list(argv)
    if out and out[0] in ("python", "python3"):
        out[0] = sys.executable
    at = _script_at(out)
    if cfg.workdir == "run" and at is not None and cfg.cwd and not os.path.isabs(out[at]):
        out[at] = os.path.join(cfg.cwd, out[at])  # it runs in the run's own folder
    if cfg.attach_to is not None:
        target = python_target(out)
        if target is not None:
            opts, rest = target
            out = [out[0], *opts, "-m", BOOTSTRAP, *rest]
    return out


def check_spec_files(cfg: AblationConfig) -> None:
    """Every variant's spec file reads back, through :func:`plugdrop.parse_spec`, as the very
    attachments the config checked (what the program's ``attach_all`` will read)."""
    for v in cfg.variants:
        text = spec_text(v).decode()
        try:
            back = pd.parse_spec(text, source=f"the spec file of variant {v.name!r}")
        except pd.SpecError as e:  # pragma: no cover - a bug of ours
            raise ConfigError(f"{v.loc}: {e}") from None
        want = json.loads(json.dumps([pd.spec.plain(a.describe()) for a in v.attachments]))
        got = json.loads(json.dumps([pd.spec.plain(a.describe()) for a in back]))
        if got != want:  # pragma: no cover - a bug of ours
            raise ConfigError(f"{v.loc}: variant {v.name!r}: its spec file reads back as "
                              f"{got}, not {want}; report this as a bug of plugdrop")


def check_can_start(cfg: AblationConfig, env: Mapping[str, str] | None = None) -> None:
    """Whether the program can start here: its working directory exists, its executable is
    found (on ``PATH``, or a file that may be executed), and the script an interpreter is
    given (``python train.py``) exists.

    Raises:
        ConfigError: one line naming what is missing, where, and the fix.
    """
    assert cfg.program is not None
    where = cfg.loc("program")
    host = socket.gethostname()
    cwd = cfg.cwd
    if cwd is None or not Path(cwd).is_dir():
        raise ConfigError(f"{where}: program: its working directory {cwd or '(unknown)'} does "
                          f"not exist on {host} (the program runs in the folder plugdrop "
                          f"ablate was started in); start it from a folder every machine has")
    rendered = cfg.program.render(seed=0, variant="baseline", spec="spec.yaml", run_dir="work",
                                  metrics="metrics.jsonl")
    exe = argv_of(cfg, rendered)[0]
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    if "/" in exe:
        full = Path(cwd, exe)
        if not full.exists():
            raise ConfigError(f"{where}: program: {exe} does not exist in {cwd} on {host}; "
                              f"give its path (relative to the folder plugdrop ablate is "
                              f"started in) or a command on PATH")
        if full.is_dir():
            raise ConfigError(f"{where}: program: {exe} is a folder; give the program file")
        if not os.access(full, os.X_OK):
            raise ConfigError(f"{where}: program: {exe} is not executable; chmod +x {exe}, "
                              f"or run it through its interpreter (program: [bash, {exe}, "
                              f"...])")
        if not _executable_format(full):
            raise ConfigError(f"{where}: program: {exe} is neither a program nor a script "
                              f"that names its interpreter (a first line such as "
                              f"#!/usr/bin/env bash); add that line, or run it through its "
                              f"interpreter (program: [bash, {exe}, ...])")
    elif shutil.which(exe, path=path) is None:
        raise ConfigError(f"{where}: program: {exe!r} is not found on PATH on {host}; give "
                          f"its full path, or install it (python: {_this_python()})")
    script = _script(rendered)
    if script is not None and not Path(cwd, script).is_file():
        raise ConfigError(f"{where}: program: {os.path.basename(exe)} is given the script "
                          f"{script}, which does not exist in {cwd} on {host} (the program "
                          f"runs in the folder plugdrop ablate was started in)")


def _executable_format(path: Path) -> bool:
    """Whether the kernel can run ``path`` itself: a script that starts with ``#!``, or an
    ELF program (an unreadable file is left to the start to judge)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return True
    return head[:2] == b"#!" or head == b"\x7fELF"


def _script(argv: Sequence[str]) -> str | None:
    """The script an interpreter is given (its first argument that is not an option), or
    ``None`` (no interpreter, a module ``-m``, a command ``-c``)."""
    at = _script_at(argv)
    return None if at is None else argv[at]


def _script_at(argv: Sequence[str]) -> int | None:
    """Where in ``argv`` the script of :func:`_script` is."""
    if not argv or not _INTERPRETER.fullmatch(os.path.basename(argv[0])):
        return None
    skip = False
    for i, arg in enumerate(argv[1:], 1):
        if skip:
            skip = False
            continue
        if arg in _NO_SCRIPT:
            return None
        if arg in _WITH_VALUE:
            skip = True
            continue
        if arg.startswith(("-", "+")):
            continue
        return i
    return None


def _this_python() -> str:
    """The Python that runs plugdrop (what ``program: [python, ...]`` might have meant)."""
    import sys

    return sys.executable

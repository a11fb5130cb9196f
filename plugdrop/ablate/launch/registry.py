"""The launchers, one entry each: its module and class, the options it takes, the optional
package it needs. A new launcher is one module in this package and one entry here."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from ..config import AblationConfig
from ..errors import ConfigError
from . import options as O
from .protocol import Launcher

__all__ = ["LAUNCHERS", "Entry", "gpus_for_jobs", "make_launcher", "require", "takers"]

_PER_RUN = ("cpus_per_run", "gpus_per_run", "nproc_per_run", "max_parallel", "max_retries")


@dataclass(frozen=True)
class Entry:
    """A launcher: ``--launcher NAME`` makes ``CLASS(options)`` from ``module`` (a module of
    this package); it takes the options ``takes`` (fields of
    :class:`~.options.LaunchOptions`) and needs ``package`` (``pip install
    'plugdrop[extra]'``) when set."""

    name: str
    module: str
    cls: str
    takes: tuple[str, ...]
    help: str
    package: str | None = None
    extra: str | None = None


_ENTRIES = (
    Entry("local", "local", "LocalLauncher", (), "here, one run after another"),
    Entry("processes", "processes", "ProcessesLauncher", _PER_RUN,
          "in processes of their own on this machine, several at once (each with its GPUs)"),
    Entry("submitit", "submitit", "SubmititLauncher",
          _PER_RUN + ("timeout_min", "signal_lead", "slurm_partition", "slurm_cluster"),
          "as Slurm jobs (one array job)", "submitit", "slurm"),
    Entry("ray", "ray", "RayLauncher", _PER_RUN + ("address",), "as Ray tasks", "ray", "ray"),
)

#: the launchers by name, in the order ``--help`` lists them
LAUNCHERS: dict[str, Entry] = {e.name: e for e in _ENTRIES}


def takers() -> dict[str, list[str]]:
    """Option -> the launchers that take it."""
    out: dict[str, list[str]] = {}
    for e in _ENTRIES:
        for name in e.takes:
            out.setdefault(name, []).append(e.name)
    return out


def require(name: str) -> None:
    """Fail with the install command when the optional package of launcher ``name`` is
    missing."""
    e = LAUNCHERS[name]
    if e.package is not None and importlib.util.find_spec(e.package) is None:
        raise ConfigError(f"--launcher {name} needs the {e.package} package: "
                          f"pip install 'plugdrop[{e.extra}]'")


def check(name: str, options: O.LaunchOptions) -> None:
    """A known launcher, and options it takes with values in range."""
    if name not in LAUNCHERS:
        raise ConfigError(f"--launcher {name!r}: choose one of {', '.join(LAUNCHERS)}")
    O.check(name, options, takers())


def make_launcher(name: str, options: O.LaunchOptions) -> Launcher:
    """The launcher called ``name``; fails early (before any data is loaded) for an unknown
    name, an option it does not take, a bad value, a missing extra or an unreachable
    cluster."""
    check(name, options)
    require(name)
    e = LAUNCHERS[name]
    module = importlib.import_module(f"{__package__}.{e.module}")
    launcher: Launcher = getattr(module, e.cls)(options)
    return launcher


def gpus_for_jobs(cfg: AblationConfig, launcher: str, options: O.LaunchOptions) -> str | None:
    """The GPUs each job of ``launcher`` gets, against the config's device: a CUDA device with
    none raises :class:`ConfigError` (:func:`~..config.check_gpus`); ``--launcher processes``
    returns the line to print: that each run got one GPU by default, or, for ``device: auto``
    with ``--gpus-per-run 0`` on a machine with GPUs, that they are left idle
    (:func:`~..config.gpus_left_idle`); else ``None``."""
    from ..config import check_gpus, gpus_left_idle

    if launcher != "processes":
        check_gpus(cfg, launcher, options.gpus_per_run or 0)
        return None
    from .processes import gpus_each, gpus_notice

    each, visible = gpus_each(options)
    if each == 0 and str(cfg.device).startswith("cuda") and options.gpus_per_run is None:
        raise ConfigError(f"{cfg.loc('device')}: device: {cfg.device}, but this machine has no "
                          f"GPU for --launcher processes to give its runs (CUDA_VISIBLE_DEVICES "
                          f"or the driver): use device: auto, or a machine with GPUs")
    check_gpus(cfg, launcher, each)
    return gpus_notice(options) or gpus_left_idle(cfg, launcher, each, len(visible))

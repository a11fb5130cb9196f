"""The options of the launchers, declared once: each field of :class:`LaunchOptions` carries its
flag (derived from its name: ``cpus_per_run`` -> ``--cpus-per-run``), help, bounds and choices;
the ``plugdrop ablate`` flags, the values and their checks are derived from it. Which launcher
takes which option is said by each launcher's registry entry (:mod:`.registry`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ConfigError

__all__ = ["LaunchOptions", "Option", "add_arguments", "flag_name", "from_args", "option"]


@dataclass(frozen=True)
class Option:
    """One launcher option: its help, metavar, the smallest value it takes, its choices, and a
    hint for the launchers that do not take it."""

    help: str
    metavar: str | None = None
    minimum: int | None = None
    choices: tuple[str, ...] | None = None
    elsewhere: str = ""


def option(default: Any, *, help: str, metavar: str | None = None, minimum: int | None = None,
           choices: tuple[str, ...] | None = None, elsewhere: str = "") -> Any:
    """A field of :class:`LaunchOptions` carrying its :class:`Option`."""
    return field(default=default,
                 metadata={"option": Option(help, metavar, minimum, choices, elsewhere)})


@dataclass(frozen=True)
class LaunchOptions:
    """The resources and limits of each run's job (the ``--*-per-run`` flags and the rest)."""

    cpus_per_run: int = option(1, metavar="N", minimum=1,
                               help="CPUs of each job (also its torch threads)")
    gpus_per_run: int | None = option(
        None, metavar="N", minimum=0,
        help="GPUs of each job; default: 1 with --launcher processes on a machine with GPUs "
             "(as many runs at once as GPUs), else 0")
    nproc_per_run: int = option(
        1, metavar="N", minimum=1,
        help="processes per run, started through torchrun inside its job",
        elsewhere=" (use torchrun --nproc_per_node N -m plugdrop ablate ... for one "
                  "data-parallel ablation)")
    max_parallel: int | None = option(None, metavar="N", minimum=1,
                                      help="at most this many runs at once")
    max_retries: int = option(3, metavar="N", minimum=0,
                              help="restarts of a job that died; it resumes from its checkpoint")
    timeout_min: int = option(24 * 60, metavar="MIN", minimum=1,
                              help="time limit of each Slurm job; it requeues itself before it")
    signal_lead: int = option(120, metavar="S", minimum=1,
                              help="seconds before a Slurm job's time limit that it is sent "
                                   "SIGUSR2 (--signal): it checkpoints at the next step and is "
                                   "requeued")
    slurm_partition: str | None = option(None, metavar="NAME", help="the Slurm partition")
    slurm_cluster: str = option("auto", choices=("auto", "slurm", "local"),
                                help="submitit's cluster: auto = Slurm where it answers here "
                                     "(sinfo), else local processes")
    address: str | None = option(None, metavar="HOST:PORT",
                                 help="HOST:PORT of a running Ray cluster to join; default: "
                                      "start one on this machine")


def _options() -> list[tuple[str, Any, Option]]:
    return [(f.name, f.default, f.metadata["option"]) for f in fields(LaunchOptions)]


def flag_name(name: str) -> str:
    """The flag of option ``name``: ``cpus_per_run`` -> ``--cpus-per-run``."""
    return "--" + name.replace("_", "-")


def add_arguments(group: Any, takers: dict[str, list[str]]) -> None:
    """One flag per option on an argparse group; ``takers``: option -> launchers taking it."""
    for name, default, opt in _options():
        kind = str if opt.minimum is None else int
        where = " or ".join(takers.get(name, []))
        group.add_argument(flag_name(name), type=kind, default=default, metavar=opt.metavar,
                           choices=opt.choices, help=f"{opt.help} ({where})")


def from_args(args: argparse.Namespace) -> LaunchOptions:
    """The options of parsed ``plugdrop ablate`` arguments."""
    return LaunchOptions(**{name: getattr(args, name) for name, _, _ in _options()})


def check(launcher: str, options: LaunchOptions, takers: dict[str, list[str]]) -> None:
    """Refuse an option set for a launcher that does not take it, and values below an
    option's minimum, naming the flag."""
    for name, default, opt in _options():
        value = getattr(options, name)
        if value != default and launcher not in takers.get(name, []):
            where = " or ".join(takers.get(name, [])) or "none"
            raise ConfigError(f"{flag_name(name)} is an option of --launcher {where}, not of "
                              f"--launcher {launcher}{opt.elsewhere}")
    for name, default, opt in _options():
        value = getattr(options, name)
        if opt.minimum is not None and value is not None and value < opt.minimum:
            raise ConfigError(f"{flag_name(name)} {value}: must be at least {opt.minimum}")

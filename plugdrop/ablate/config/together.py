"""The checks that need several settings at once, or a setting and what only the run knows
(the data's classes, the processes, a shard): each raises a :class:`ConfigError` that names
the setting's place and the fix. :func:`check_together` runs in the loader, for every config;
the others where their second half becomes known, before any run trains."""

from __future__ import annotations

from ..errors import ConfigError
from .metrics import AUTO, METRICS
from .schema import AblationConfig

__all__ = ["batch_per_process", "check_classes", "check_gpus", "check_shard", "check_together",
           "gpus_left_idle"]


def check_together(cfg: AblationConfig) -> None:
    """What the settings of one config must agree on: an adaptive design has a baseline to
    compare with; ``decide_on: val_acc_ema`` has an EMA model; a program says what to decide
    on, and a metric plugdrop does not know comes with its margin (and a program to log it);
    ``run_timeout`` ends a program."""
    if cfg.adaptive and cfg.baseline is None:
        raise ConfigError(f"{cfg.loc('seeds')}: an adaptive design compares every variant with "
                          f"the baseline: add a variant 'baseline: []'")
    _check_program(cfg)
    if cfg.program is None and cfg.decide_on.name == "val_acc_ema" and cfg.ema is None:
        raise ConfigError(f"{cfg.loc('decide_on')}: decide_on: val_acc_ema needs an EMA model; "
                          f"add ema: true")


def _check_program(cfg: AblationConfig) -> None:
    metric = cfg.decide_on
    if cfg.program is None:
        if metric.custom:
            raise ConfigError(f"{cfg.loc('decide_on')}: decide_on: {metric.name} is no metric "
                              f"plugdrop's trainer records (it records "
                              f"{', '.join(METRICS)}); a metric of your own needs a "
                              f"program: that logs it")
        if cfg.run_timeout is not None:
            raise ConfigError(f"{cfg.loc('run_timeout')}: run_timeout ends a program that "
                              f"runs too long; it needs program: (plugdrop's own loop "
                              f"stops on a signal)")
        for key in ("attach_to", "metrics_from", "resume_args"):
            if getattr(cfg, key) is not None:
                raise ConfigError(f"{cfg.loc(key)}: {key} is a setting of a training program "
                                  f"of your own: it needs program: (plugdrop's own loop "
                                  f"attaches, logs and resumes by itself)")
        if cfg.workdir != "start":
            raise ConfigError(f"{cfg.loc('workdir')}: workdir is the folder a training program "
                              f"of your own runs in: it needs program: (plugdrop's own loop "
                              f"writes only into --out)")
        return
    if cfg.attach_to is not None:
        _check_attach_to(cfg)
    if "decide_on" not in cfg.locs:
        raise ConfigError(f"{cfg.loc('program')}: with program:, say which metric the verdicts "
                          f"compare, as the program logs it: decide_on: {{metric: NAME, goal: "
                          f"max}} (or min), or a metric plugdrop knows such as decide_on: "
                          f"val_acc")
    if metric.auto_margin is None and cfg.margin == AUTO:
        raise ConfigError(f"{cfg.loc('decide_on')}: decide_on: {metric.name} is not a metric "
                          f"plugdrop knows, so it has no margin of its own: give margin: in "
                          f"its units (the smallest difference that counts, e.g. margin: "
                          f"0.005)")


def _check_attach_to(cfg: AblationConfig) -> None:
    """``attach_to`` runs a Python program under the bootstrap: ``[python, SCRIPT, ...]`` or
    ``[python, -m, MODULE, ...]``, and every schedule has a length."""
    from .program import python_target

    assert cfg.program is not None and cfg.attach_to is not None
    if python_target(cfg.program.argv) is None:
        raise ConfigError(f"{cfg.loc('attach_to')}: attach_to runs a Python program under "
                          f"plugdrop's bootstrap: program: must be [python, SCRIPT, ...] or "
                          f"[python, -m, MODULE, ...] (interpreter options such as -u may "
                          f"come first), not {cfg.program}; or attach in the program itself "
                          f"(plugdrop.current_run().attach(model)) and leave attach_to out")
    if cfg.attach_to.steps is None:
        for v in cfg.variants:
            for a in v.attachments:
                for key, kind in a.needs_steps.items():
                    raise ConfigError(
                        f"{a.loc or v.loc}: variant {v.name!r}: {a.transform} {key}: the "
                        f"{kind} schedule takes its length from the training, which the "
                        f"bootstrap of attach_to cannot know: give it steps: (the optimizer "
                        f"steps of the training), or attach_to: {{factory: "
                        f"{cfg.attach_to.factories[0]}, steps: N}}")


def check_classes(cfg: AblationConfig, data_name: str, classes: int) -> None:
    """The decision metric must be one the runs record on data of ``classes`` classes."""
    if cfg.decide_on.name == "val_top5" and classes <= 5:
        raise ConfigError(f"{cfg.loc('decide_on')}: decide_on: val_top5 needs more than 5 "
                          f"classes ({data_name} has {classes}); use val_acc")


def check_shard(cfg: AblationConfig, shard: tuple[int, int]) -> None:
    """Shards split a fixed list of seeds: not an adaptive design's rounds."""
    if cfg.adaptive:
        raise ConfigError(f"--shard {shard[0]}/{shard[1]}: shards split a fixed list of seeds; "
                          f"an adaptive design (seeds: {{min, max}}) decides between rounds: "
                          f"run it whole, with --launcher processes, submitit or ray to train "
                          f"its runs in parallel")


def check_gpus(cfg: AblationConfig, launcher: str, gpus_per_run: int) -> None:
    """A CUDA device needs GPUs in each job: a launcher that starts jobs of their own (not
    ``local``) gives each one ``--gpus-per-run`` GPUs (none by default, but one with
    ``processes`` on a machine with GPUs), and every run would fail where it sees none."""
    if launcher != "local" and gpus_per_run == 0 and str(cfg.device).startswith("cuda"):
        raise ConfigError(f"{cfg.loc('device')}: device: {cfg.device}, but --launcher "
                          f"{launcher} gives each run's job the GPUs of --gpus-per-run, 0 "
                          f"{'here' if launcher == 'processes' else 'by default'}: add "
                          f"--gpus-per-run 1 (or device: auto, which trains on the CPU in a "
                          f"job without GPUs)")


def gpus_left_idle(cfg: AblationConfig, launcher: str, gpus_per_run: int,
                   gpus_here: int) -> str | None:
    """The notice for ``device: auto`` through ``--launcher processes`` with ``--gpus-per-run
    0`` on a machine that has ``gpus_here``: every job would train on the CPU without a word.
    ``None`` where nothing is left idle (the other launchers' jobs run on other machines)."""
    if launcher != "processes" or gpus_per_run or gpus_here == 0 or cfg.device != "auto":
        return None
    return (f"device: auto, and this machine has {gpus_here} GPU{'s' if gpus_here > 1 else ''}, "
            f"but --launcher processes gives each run's job --gpus-per-run 0 GPUs: the runs "
            f"train on the CPU (leave --gpus-per-run out to give each run one GPU)")


def batch_per_process(cfg: AblationConfig, world: int) -> int:
    """The loader batch of one process for one micro-step: ``batch_size`` is the global batch
    of one optimizer step, split over ``world`` processes and ``grad_accum`` steps."""
    parts = world * cfg.grad_accum
    if cfg.batch_size % parts:
        raise ConfigError(f"{cfg.loc('batch_size')}: batch_size {cfg.batch_size} is the global "
                          f"batch; it must divide by processes x grad_accum = {world} x "
                          f"{cfg.grad_accum}; use a multiple of {parts}")
    return cfg.batch_size // parts

"""The study driver: one loop for every kind of study (:mod:`.strategy`).

It checks the program (a dry step per variant for plugdrop's trainer; for a program, that it
can start), claims the folder under its lock (or refuses it in one line), lets the strategy
read what ended before, then asks it round after round which runs to train, hands them to the
launcher (:mod:`.jobs`), tells the strategy of each run as it ends and the listeners of
everything that happens (:mod:`.listener`), and returns the :class:`~.outcome.Outcome`.

Rank 0 owns the folder (lock, records, report); under torchrun every rank runs the loop (the
local launcher trains each run on all of them) and what rank 0 reads is shared.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from .. import runs
from ..data import DataSets
from ..errors import ConfigError, Fault
from ..launch import LaunchContext, LaunchOptions, Launcher, make_launcher
from ..launch.shard import select
from ..programs import Program, program_of
from ..progress import Progress
from ..results import FAILED, FINISHED, Run, accepted_hashes, load_ablation, load_run
from ..train import Dist, on_rank0
from .failfast import FailFast
from .jobs import dispatch
from .listener import Listener, Listeners, StudyInfo
from .outcome import Outcome
from .round import Round
from .strategy import Claim, Context, Strategy

__all__ = ["run_study"]


def _say(command: str, text: str) -> None:
    print(f"plugdrop {command}: {text}", file=sys.stderr, flush=True)


def _ended_before(strategy: Strategy) -> list[Run]:
    """Every run of the strategy's folder that ended (finished or failed), read once."""
    folder = strategy.runs_in
    if not (folder / "ablation.json").is_file():
        return []
    ab = load_ablation(folder, strategy.cfg)
    return [r for r in ab.runs if r.status in (FINISHED, FAILED)]


def run_study(strategy: Strategy, *, resume: bool, d: Dist, launcher: Launcher | None = None,
              options: LaunchOptions | None = None, listeners: Iterable[Listener] | None = None,
              data: DataSets | None = None, shard: tuple[int, int] | None = None,
              accept_data_change: bool = False) -> Outcome:
    """Run ``strategy``'s study into its folder until it is over, or a signal stops it
    (``--resume`` continues it and ends as an uninterrupted study would).

    Args:
        strategy: what the study is (:class:`~.grid.Grid`, :class:`~.adaptive.Adaptive`,
            :class:`~.search.Search`), holding its config and folder.
        resume: continue the study in its folder (refused otherwise when it holds runs).
        d: this process's place under torchrun.
        launcher: where the runs train (:func:`plugdrop.ablate.launch.make_launcher`);
            default: here, one after another. Closed when the study ends.
        options: the launcher's options (retries among them).
        listeners: what hears the study's events; default: the strategy's own
            (:meth:`~.strategy.Strategy.listeners`: the console, the report, the decisions).
        data: the data sets of plugdrop's trainer, when loaded already.
        shard: ``(i, n)``: only the i-th of n shares of a fixed design's runs.
        accept_data_change: resume although the data folder's files changed.

    Raises:
        ConfigError: a mistake in the config, data or folder (before any run trains, or when
            met).
        Fault: the environment failed (a full disk, data that vanished): the study stopped,
            no run is marked failed, ``--resume`` continues once the fault is removed.
    """
    options = options or LaunchOptions()
    launcher = launcher or make_launcher("local", options)
    try:
        out, cfg = strategy.out, strategy.cfg
        runs.check_out(out)
        program = program_of(cfg, data)
        if resume:
            on_rank0(d, lambda: program.check_folder(out))
        # everything a run needs, checked before any trains (of a shard: its own variants')
        program.prepare(d, None if shard is None else {v for v, _ in select(cfg.runs(), *shard)})
        lock = runs.Lock(out, shared=shard is not None, command=strategy.command)
        how = Claim(resume, shard, program, d, accept_data_change)
        on_rank0(d, lambda: _claim(strategy, lock, how))
        try:
            return _run(strategy, launcher, options, listeners, program, d, shard)
        finally:
            if d.main:
                lock.release()
    finally:
        launcher.close()


def _claim(strategy: Strategy, lock: runs.Lock, how: Claim) -> None:
    runs.ensure_dir(strategy.out, "the study's folder")
    lock.acquire()
    try:
        warning = strategy.claim(how)
    except (ConfigError, Fault):
        lock.release()
        raise
    if warning is not None:
        _say(strategy.command, f"warning: {warning}")


def _run(strategy: Strategy, launcher: Launcher, options: LaunchOptions,
         listeners: Iterable[Listener] | None, program: Program, d: Dist,
         shard: tuple[int, int] | None) -> Outcome:
    command = strategy.command
    bus = Listeners(strategy.listeners() if listeners is None else listeners)
    info = StudyInfo(command, strategy.out, strategy.runs_in, strategy.cfg, d, strategy,
                     launcher.name, program, shard)
    ctx = Context(d, program, lambda: on_rank0(d, lambda: _ended_before(strategy)))
    strategy.open(ctx)
    outcome = Outcome()
    bus.on_study_start(info)
    hashed = (on_rank0(d, lambda: accepted_hashes(strategy.runs_in, strategy.cfg.hash()))
              if strategy.hashed else None)
    logged = strategy.cfg.program is not None
    folder = strategy.runs_in

    fail_fast = FailFast(info, ctx.ended_before,
                         1 if launcher.name == "local" else options.max_parallel or 2)

    def on_end(rd: runs.RunDir, status: str, detail: str | None) -> None:
        run = on_rank0(d, lambda: load_run(folder, rd.variant, rd.seed, hashed, logged, []))
        strategy.ended(run)
        bus.on_run_end(info, rd, status, detail)
        if logged:
            on_rank0(d, lambda: fail_fast.ended(rd, status))

    while True:
        rnd = strategy.next_round()
        decisions = strategy.decisions()
        if decisions is not None:
            bus.on_decision(info, decisions)
        if rnd is None:
            break
        on_rank0(d, lambda: strategy.before_round(rnd, program, d))
        info.cfg, info.rounds = rnd.cfg, info.rounds + 1
        outcome.rounds += 1
        bus.on_round_start(info, rnd)
        got = Outcome()
        dispatch(launcher, LaunchContext(rnd.cfg, folder, d, _program(rnd, program),
                                         Progress(len(rnd.runs), d.main), options),
                 list(rnd.runs), got, on_end, command)
        outcome.finished += got.finished
        outcome.failed += got.failed
        bus.on_round_end(info, rnd)
        if got.stopped:
            outcome.stopped, outcome.at_once = got.stopped, got.at_once
            break
        if logged:
            on_rank0(d, lambda: fail_fast.round_ended(got.failed, got.finished))
    outcome.result = strategy.result()
    bus.on_study_end(info, outcome)
    return outcome


def _program(rnd: Round, program: Program) -> Program:
    """The program of a round: the study's, or one made for the round's config (a search's
    grows with its candidates)."""
    if program.cfg is rnd.cfg:
        return program
    return program_of(rnd.cfg, getattr(program, "data", None))


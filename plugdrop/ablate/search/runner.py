"""The search: the folder claimed, the proposals (:mod:`.study`), the race replayed from the run
folders (:mod:`.race`), each round's runs trained through the runner's own launchers and jobs
into ``OUT/trials`` (an ablation folder whose variants are the baseline and the candidates so
far), then the confirmation, and the results written (:mod:`.results`, :mod:`.report`).

``OUT/``: ``search.json``, ``best.yaml``, ``report.html`` (and its plots), ``study.journal``
(Optuna's journal), ``search-config.json`` (what a resumed search must match), ``trials/``
(the run folders, read as any ablation's: ``plugdrop report OUT/trials``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import runs
from ..config import AblationConfig
from ..errors import ConfigError, one_line
from ..launch import LaunchContext, LaunchOptions, Launcher, Outcome, drive, make_launcher
from ..programs import program_of
from ..progress import Progress
from ..results import decision_values, load_ablation
from ..runner import versions
from ..train import Dist
from ..decide.race import FAILED, Candidate, RaceSetup, Step, replay
from .results import write_results
from .setup import BASELINE, SearchConfig
from .study import JOURNAL, Study

__all__ = ["CONFIG_RECORD", "SearchOutcome", "TRIALS", "run_search", "setup_of"]

#: the run folders' ablation, inside the search folder
TRIALS = "trials"
#: what a resumed search is held to
CONFIG_RECORD = "search-config.json"
#: candidates that cannot run before any could, after which the space is called wrong
_FIRST_FAILURES = 3


@dataclass
class SearchOutcome:
    """How a search's invocation ended: the last :class:`~.race.Step`, the runs it trained
    and that failed, and the signal that stopped it (0: none)."""

    step: Step | None = None
    finished: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    stopped: int = 0
    at_once: bool = False
    files: list[Path] = field(default_factory=list)


def setup_of(sc: SearchConfig) -> RaceSetup:
    """The race's view of a search config."""
    return RaceSetup(sc.search_seeds, sc.seeds_min, sc.seeds_max, sc.seeds_step,
                     sc.confirm_first, sc.spec.budget, sc.spec.parallel, sc.base.decision,
                     BASELINE)


def _check_folder(sc: SearchConfig, out: Path, resume: bool) -> None:
    """Refuse a folder of another search, or of this one without ``--resume``."""
    record = out / CONFIG_RECORD
    if record.exists():
        try:
            old = json.loads(record.read_text())
        except (OSError, ValueError):
            old = {}
        if old.get("fingerprint") != sc.fingerprint():
            raise ConfigError(f"--out {out}: holds another search (another config or search: "
                              f"block); choose another --out, or restore that config to "
                              f"continue it with --resume")
        if not resume:
            raise ConfigError(f"--out {out}: holds this search already; add --resume to "
                              f"continue it, or choose another --out")
    elif any(p.name != ".lock" for p in out.iterdir()):
        raise ConfigError(f"--out {out}: holds other files; give an empty or new folder")


def _claim(sc: SearchConfig, out: Path) -> None:
    """Record this search's fingerprint (what ``--resume`` is held to)."""
    runs.atomic_write_json(out / CONFIG_RECORD, {"fingerprint": sc.fingerprint(), "source": sc.base.source,
                                    "search": sc.spec.plain(), "config": sc.base.resolved()},
                           "the search's config")


class _Search:
    def __init__(self, sc: SearchConfig, out: Path, d: Dist, launcher: Launcher,
                 options: LaunchOptions) -> None:
        self.sc, self.out, self.d = sc, out, d
        self.launcher, self.options = launcher, options
        self.trials = out / TRIALS
        self.data: Any = None
        self.checked: set[int] = set()
        self.setup = setup_of(sc)

    def open(self) -> None:
        """The study, created or loaded (once the folder is claimed)."""
        self.study = Study(self.out / JOURNAL, self.sc.spec)

    def attachments(self, c: Candidate) -> list[Any]:
        return self.sc.spec.attachments(c.params)

    def prepare(self) -> None:
        """The program checked on the baseline before any run (plugdrop's trainer: the data
        loaded and the baseline's dry step; a program: that it can start)."""
        program = program_of(self.sc.base)
        program.prepare(self.d)
        self.data = getattr(program, "data", None)
        self.manifest_extra = program.manifest(self.d)

    def config(self, candidates: Sequence[Candidate]) -> AblationConfig:
        return self.sc.ablation({c.name: self.attachments(c) for c in candidates if c.seeds},
                                self.trials)

    def values(self) -> dict[str, dict[int, float | None]]:
        if not (self.trials / "ablation.json").exists():
            return {}
        metric = self.sc.base.decision.metric.name
        return decision_values(load_ablation(self.trials), metric)

    def check(self, step: Step) -> bool:
        """Check the candidates new to this process (a dry step with plugdrop's trainer);
        one that cannot run is failed in the study. Whether all could."""
        ok = True
        for c in step.candidates:
            if c.index in self.checked or c.status == FAILED or not c.seeds:
                continue
            try:
                cfg = self.sc.ablation({c.name: self.attachments(c)}, self.trials)
                program_of(cfg, self.data).prepare(self.d)
            except ConfigError as e:
                passed = any(x.index in self.checked for x in step.candidates)
                if not passed and c.index + 1 >= _FIRST_FAILURES:
                    raise ConfigError(f"search.space: the first {c.index + 1} candidates "
                                      f"cannot run; the last: {one_line(e)}") from None
                self.study.fail(c.index, one_line(e))
                ok = False
                continue
            self.checked.add(c.index)
        return ok

    def write_folder(self, cfg: AblationConfig, step: Step) -> None:
        """The run folders' ``ablation.json`` and stored config, for the jobs and reports; its
        hash is left out (it grows with the candidates): the search's fingerprint guards it."""
        from ..config import save_config

        runs.ensure_dir(self.trials, "the search's run folders")
        given = [(c.name, s) for c in step.candidates for s in c.seeds]
        if step.best is not None:
            given += [(step.best.name, s) for s in step.confirm_seeds]
        base = sorted({s for _, s in given} | {s for _, s in step.needed})
        ids = [(BASELINE, s) for s in base] + given + list(step.needed)
        manifest = {"format": runs.FORMAT, "config": cfg.resolved(), "config_hash": None,
                    "search_fingerprint": self.sc.fingerprint(),
                    "variants": cfg.variant_names, "baseline": BASELINE,
                    "seeds": list(cfg.seed_list),
                    "runs": [{"id": runs.run_id(v, s), "variant": v, "seed": s}
                             for v, s in dict.fromkeys(ids)],
                    "versions": versions(), **self.manifest_extra}
        runs.atomic_write_json(self.trials / "ablation.json", manifest, "the search's record")
        save_config(self.trials, cfg)

    def run(self, outcome: SearchOutcome) -> None:
        last: list[tuple[str, int]] | None = None
        while True:
            step = replay(self.setup, self.values(), self.study)
            outcome.step = step
            self.results(step, final=False)
            if not step.needed:
                return
            if not self.check(step):
                continue  # a candidate failed its check: the race goes on without it
            if step.needed == last:
                return  # nothing ended last round (a launcher that trains nothing)
            last = step.needed
            shown = [c for c in step.candidates if c.seeds]
            cfg = self.config(shown)
            self.write_folder(cfg, step)
            self.header(step)
            todo = [runs.RunDir(self.trials, v, s) for v, s in step.needed]
            got = Outcome()
            drive(self.launcher, LaunchContext(cfg, self.trials, self.d,
                                               program_of(cfg, self.data),
                                               Progress(len(todo), self.d.main), self.options),
                  todo, got)
            outcome.finished += got.finished
            outcome.failed += got.failed
            if got.stopped:
                outcome.stopped, outcome.at_once = got.stopped, got.at_once
                return

    def header(self, step: Step) -> None:
        what = ("confirming " + (step.best.name if step.best else "?")
                if step.phase == "confirm" else
                f"round {step.rounds}, {len(step.candidates)} candidates so far")
        print(f"plugdrop search: {what}: {len(step.needed)} runs to train, {step.runs} of "
              f"{self.sc.spec.budget} trained"
              + (f" through {self.launcher.name}" if self.launcher.name != "local" else ""),
              flush=True)

    def results(self, step: Step, final: bool) -> list[Path]:
        return write_results(self.out, self.sc, step, self.study,
                             {c.index: self.attachments(c) for c in step.candidates},
                             final=final)


def run_search(sc: SearchConfig, *, out: Path, resume: bool, d: Dist,
               launcher: Launcher | None = None, options: LaunchOptions | None = None
               ) -> SearchOutcome:
    """Search ``sc`` into ``out`` until its budget is spent and its best candidate confirmed
    (or a signal stops it: ``--resume`` continues and ends as an uninterrupted search).

    Raises:
        ConfigError: a mistake in the config, its space or the folder (before any run trains,
            or, for a space none of whose candidates can run, after the first few).
        Fault: the environment failed (a full disk): nothing is marked failed, ``--resume``
            continues.
    """
    options = options or LaunchOptions()
    launcher = launcher or make_launcher("local", options)
    outcome = SearchOutcome()
    try:
        runs.check_out(out)
        runs.ensure_dir(out, "the search folder")
        lock = runs.Lock(out)
        lock.acquire()
        try:
            _check_folder(sc, out, resume)
            search = _Search(sc, out, d, launcher, options)
            search.prepare()
            _claim(sc, out)
            search.open()
            search.run(outcome)
            if outcome.step is not None and not outcome.stopped:
                outcome.files = search.results(outcome.step, final=True)
        finally:
            lock.release()
    finally:
        launcher.close()
    return outcome

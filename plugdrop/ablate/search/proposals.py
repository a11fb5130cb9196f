"""The proposals: an Optuna study in ``OUT/study.journal`` (Optuna's journal file: JSON lines,
never a pickle) whose trials are the candidates.

Candidate ``k`` is the trial whose user attribute ``candidate`` is ``k``. Its parameters come
from a sampler seeded by ``search.seed`` and ``k`` alone (not by the sampler's history of
draws), so that a search killed at any moment and resumed proposes what an uninterrupted one
proposes: the trials told before an ask are the same, and so is the sampler's seed. A trial
asked but never labelled (a kill inside the ask) is marked failed and asked again.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .space import SAMPLERS, TPE_STARTUP, Dimension, SearchSpec

__all__ = ["INSTALL", "JOURNAL", "Proposal", "Proposals", "check_sampler", "importance",
           "make_sampler",
           "require_optuna"]

#: the study's file in the search folder
JOURNAL = "study.journal"
#: what says how to get Optuna
INSTALL = "plugdrop search needs Optuna: pip install 'plugdrop[search]'"
_NAME = "plugdrop-search"


def require_optuna() -> Any:
    """The ``optuna`` module, quiet; a :class:`ConfigError` saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise ConfigError(INSTALL) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def make_sampler(spec: SearchSpec, k: int) -> Any:
    """The sampler that proposes candidate ``k``: ``search.sampler`` with its options, seeded
    by ``search.seed`` and ``k``."""
    optuna = require_optuna()
    cls = getattr(optuna.samplers, SAMPLERS[spec.sampler])
    options = dict(spec.sampler_options)
    if spec.sampler == "tpe":
        options.setdefault("n_startup_trials", TPE_STARTUP)
        options.setdefault("multivariate", True)
    seed = (spec.seed * 1_000_003 + k) % (2 ** 31 - 1)
    try:
        return cls(seed=seed, **options)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{spec.at('sampler')}: search.sampler: {spec.sampler}: {e}") from None
    except ImportError as e:
        raise ConfigError(f"{spec.at('sampler')}: search.sampler: {spec.sampler} needs a package: "
                          f"{e}") from None


#: options Optuna takes without checking their values, and the least value each takes
_LEAST = {"n_startup_trials": 0, "n_ei_candidates": 1, "prior_weight": 0.0,
          "n_preliminary_samples": 1, "population_size": 1}
#: the most trials the dry run of a sampler asks for (past its start-up trials)
_DRY_RUN = 24


def _kinds(annotation: Any) -> tuple[type, ...] | None:
    """The plain types an option's annotation allows (``"int | None"`` -> ``(int, NoneType)``),
    or ``None`` when it allows something else (a callable, a class) that is left to Optuna."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    names = {"int": int, "float": float, "bool": bool, "str": str, "None": type(None)}
    parts = [p.strip() for p in str(text).split("|")]
    if not parts or any(p not in names for p in parts):
        return None
    return tuple(names[p] for p in parts)


def check_sampler(spec: SearchSpec) -> None:
    """The sampler and its options as Optuna takes them, before any run: each option's type
    (from the sampler's signature) and, where Optuna does not check it, its range; then a dry
    run of the sampler over the search's space (asking and telling a few made-up trials), which
    finds what only sampling meets (a package the sampler needs, a value it rejects late).

    Raises:
        ConfigError: one line naming the option or the package, at ``search.sampler``.
    """
    import inspect
    import random

    optuna = require_optuna()
    cls = getattr(optuna.samplers, SAMPLERS[spec.sampler])
    where = f"{spec.at('sampler')}: search.sampler: {spec.sampler}"
    params = inspect.signature(cls).parameters
    for name, value in spec.sampler_options.items():
        p = params.get(name)
        kinds = _kinds(p.annotation) if p is not None else None
        if kinds is not None:
            fits = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
            if float in kinds and isinstance(value, int) and not isinstance(value, bool):
                fits = True
            if not fits:
                want = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
                raise ConfigError(f"{where}: option {name} takes {want}, got {value!r}")
        least = _LEAST.get(name)
        if least is not None and isinstance(value, (int, float)) and not isinstance(
                value, bool) and (value < least or (least == 0.0 and isinstance(least, float)
                                                    and value <= 0)):
            bound = f"> {least:g}" if isinstance(least, float) else f">= {least}"
            raise ConfigError(f"{where}: option {name} must be {bound}, got {value!r}")
    sampler = make_sampler(spec, 0)
    study = optuna.create_study(sampler=sampler, direction="maximize")
    dists = {d.name: _distribution(d) for d in spec.dimensions}
    startup = spec.sampler_options.get("n_startup_trials", TPE_STARTUP)
    rng = random.Random(0)
    try:
        for _ in range(min(int(startup) + 2, _DRY_RUN) if isinstance(startup, int) else 2):
            trial = study.ask(dists)
            study.tell(trial, rng.random())
    except ImportError as e:
        raise ConfigError(f"{where} needs a package that is not installed: {e} (pip install "
                          f"{getattr(e, 'name', None) or 'it'})") from None
    except Exception as e:  # Optuna's own check, met only when it samples
        raise ConfigError(f"{where} with {dict(spec.sampler_options)} fails when it samples: "
                          f"{type(e).__name__}: {e}") from None


def _distribution(d: Dimension) -> Any:
    optuna = require_optuna()
    dist = optuna.distributions
    if d.choices is not None:
        return dist.CategoricalDistribution(list(d.labels))
    if d.integer:
        return dist.IntDistribution(int(d.low), int(d.high), log=d.log)
    return dist.FloatDistribution(d.low, d.high, log=d.log)


@dataclass(frozen=True)
class Proposal:
    """Candidate ``index``: Optuna's trial ``number`` and ``params``; ``error``: why it could
    not run (its attachments failed the dry step), ``None`` if it could."""

    index: int
    number: int
    params: Mapping[str, Any]
    error: str | None = None


class Proposals:
    """The search's proposals: an Optuna study stored in ``path`` (created, or loaded to resume).

    The caller holds the search folder's lock, so no other process reads or writes the journal:
    a journal lock found at the start (``study.journal.lock``) was left by a search killed
    while it read or wrote, and is released."""

    def __init__(self, path: Path, spec: SearchSpec) -> None:
        optuna = require_optuna()
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

        self.spec = spec
        self.optuna = optuna
        self.dists = {d.name: _distribution(d) for d in spec.dimensions}
        # Absolute: Optuna's lock is a symbolic link to this path, and a relative one (from
        # --out out) dangles; waiting on a dangling lock, Optuna spins without end.
        file = str(path.resolve())
        lock = JournalFileSymlinkLock(file)
        try:
            lock.release()  # a kill's leftover (see above)
        except RuntimeError:
            pass  # none was left: the usual case
        storage = JournalStorage(JournalFileBackend(file, lock_obj=lock))
        self.study = optuna.create_study(storage=storage, study_name=_NAME,
                                         direction="maximize", load_if_exists=True)
        self.storage = storage
        self.study_id = storage.get_study_id_from_name(_NAME)
        self.trials: dict[int, Any] = {}
        self.told: set[int] = set()
        running = optuna.trial.TrialState.RUNNING
        for t in self.study.get_trials(deepcopy=False):
            k = t.user_attrs.get("candidate")
            if isinstance(k, int) and set(t.params) == set(self.dists):
                self.trials[k] = t
                if t.state != running:
                    self.told.add(k)
            elif t.state == running:  # asked but never labelled: a kill inside the ask
                self.study.tell(t.number, state=optuna.trial.TrialState.FAIL)

    def propose(self, k: int) -> Proposal:
        """Candidate ``k``: the trial that holds it, or a new one asked now."""
        t = self.trials.get(k)
        if t is None:
            self.study.sampler = make_sampler(self.spec, k)
            trial = self.study.ask(self.dists)
            trial.set_user_attr("candidate", k)
            t = self.trials[k] = self.study.get_trials(deepcopy=False)[trial.number]
        error = t.user_attrs.get("error")
        return Proposal(k, t.number, dict(t.params), error if isinstance(error, str) else None)

    def fail(self, k: int, error: str) -> None:
        """Candidate ``k`` cannot run (``error`` says why): its trial failed."""
        if k in self.told:
            return
        number = self.trials[k].number
        # the storage's call: Optuna's Study has none for a trial it did not hand out
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)
        self.storage.set_trial_user_attr(trial_id, "error", error)
        self.study.tell(number, state=self.optuna.trial.TrialState.FAIL)
        self.trials[k] = self.study.get_trials(deepcopy=False)[number]
        self.told.add(k)

    def tell(self, k: int, value: float | None) -> None:
        """Candidate ``k`` raced to its end: its estimate (oriented: higher is better), or
        ``None`` when its runs failed."""
        if k in self.told:
            return
        number = self.trials[k].number
        if value is None or not math.isfinite(value):
            self.study.tell(number, state=self.optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(number, float(value))
        self.told.add(k)


def importance(study: Proposals) -> tuple[dict[str, float], str]:
    """Each searched dimension's importance for the candidates' estimates (fANOVA, else
    Optuna's default evaluator) and the evaluator's name; empty when too few candidates
    finished to say."""
    optuna = study.optuna
    complete = study.study.get_trials(deepcopy=False,
                                      states=(optuna.trial.TrialState.COMPLETE,))
    if len(complete) < 2 or len({t.value for t in complete}) < 2:
        return {}, ""
    tries = [("fANOVA", lambda: optuna.importance.FanovaImportanceEvaluator(seed=0)),
             ("Optuna's default evaluator", lambda: None)]
    for name, make in tries:
        try:
            got = optuna.importance.get_param_importances(study.study, evaluator=make())
            return {k: float(v) for k, v in got.items()}, name
        except Exception:  # too few distinct values for an evaluator: try the next
            continue
    return {}, ""

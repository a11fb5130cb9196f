"""Shared helpers of the tests of ``plugdrop search``: the config around the stdlib program
``search_target.py`` (whose metric is a known function of its spec), and the search driven in this
process with a test double of the trainer: the program's function itself, called per run."""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # tests/ablate: _runner_helpers

import search_target as target  # noqa: E402

from plugdrop.ablate.config.locations import plain  # noqa: E402
from plugdrop.ablate.decide.race import replay  # noqa: E402
from plugdrop.ablate.search import Proposals, loads_search, setup_of  # noqa: E402

SPACE = """\
    - {layers: {choice: ["layer1.*", "layer2.*", "layer3.*", "layer4.*"]}, transform: DropBlock,
       p: {range: [0.01, 0.3]}, block_size: {choice: [3, 5]}}
"""


def config(*, budget: int = 80, seed: int = 0, seeds: str = "{min: 3, max: 6}",
           extra: str = "", space: str = SPACE, program: str | None = None) -> str:
    """A search config around ``search_target.py``."""
    program = program or json.dumps([sys.executable, "search_target.py"])
    # the program writes only under {run_dir}: its runs may share the working directory (last,
    # so that the places of the mistakes tests make stay where they were)
    return (f"program: {program}\ndecide_on: {{metric: score, goal: max}}\n"
            f"margin: 0.005\nseeds: {seeds}\nvariants:\n  baseline: []\nsearch:\n  budget: {budget}\n"
            f"  seed: {seed}\n{extra}  space:\n{space}workdir: shared\n")


#: a small search (10 runs, two candidates racing at once) that the launchers' tests and the
#: killed search's compare with the one :func:`local_search` ran
TEXT = config(budget=10, seeds="{min: 2, max: 2}", seed=1, extra="  parallel: 2\n")


def same(out: Path) -> dict:
    """What two runs of one search must agree on: ``search.json``'s best, confirmation,
    candidates, runs and seeds."""
    doc = json.loads((out / "search.json").read_text())
    return {k: doc[k] for k in ("best", "confirmation", "candidates", "runs", "search_seeds")}


@pytest.fixture(scope="session")
def local_search(tmp_path_factory) -> Path:
    """The ``--out`` of :data:`TEXT` searched through the local launcher in this process, once
    for the test session (``_runner_helpers.once``)."""
    from _runner_helpers import env, once

    from plugdrop.cli import main

    def build(home: Path) -> None:
        shutil.copy2(HERE / "search_target.py", home / "search_target.py")
        (home / "search.yaml").write_text(TEXT)
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(home)
            for k, v in env().items():  # the jobs import this worktree
                mp.setenv(k, v)
            assert main(["search", "search.yaml", "--out", "out"]) in (0, 1)

    return once(tmp_path_factory, "search-local", build) / "out"


def score(spec: Any, seed: int, salt: str = "") -> float:
    """What ``search_target.py`` logs for ``spec`` and ``seed``; a ``salt`` draws another
    world's noise (independent searches: without it, every search meets the same baseline
    runs, and their errors are one draw, not many)."""
    shared = random.Random(f"{salt}seed-{seed}").gauss(0.0, 0.02)
    own = random.Random(f"{salt}{seed}-{json.dumps(spec, sort_keys=True)}").gauss(0.0, 0.003)
    return 0.5 + target.effect(spec) + shared + own


class Stop(Exception):
    """A kill, in the middle of a search driven in this process."""


def drive(text: str, journal: Path, values: dict | None = None, stop_after: int | None = None,
          salt: str = ""):
    """Run the search of ``text`` to its end in this process (each run's value from
    :func:`score`), its study in ``journal``; ``stop_after``: raise :class:`Stop` after that
    many runs (``values`` keeps what finished); ``salt``: the noise's world (:func:`score`).
    Returns the last step and the study."""
    sc = loads_search(text, "search.yaml")
    setup = setup_of(sc)
    study = Proposals(journal, sc.spec)
    values = {} if values is None else values
    trained = 0
    while True:
        step = replay(setup, values, study)
        if not step.needed:
            return step, study, sc
        for v, s in step.needed:
            if stop_after is not None and trained >= stop_after:
                raise Stop
            spec = [] if v == "baseline" else plain(
                sc.spec.attachments(study.trials[int(v[1:])].params))
            values.setdefault(v, {})[s] = score(spec, s, salt)
            trained += 1


def found(step: Any, tol: float = 0.03) -> bool:
    """Whether the best candidate is the known optimum: layer3 at p = 0.12 +- ``tol``."""
    b = step.best.params
    return b["layers"] == "layer3.*" and abs(b["p"] - target.PEAK) <= tol

"""A program's ablation through the launchers that start jobs: ``--launcher processes`` (each
run in a process of its own, ``CUDA_VISIBLE_DEVICES`` and ``--cpus-per-run`` handed on to the
program) decides exactly as the local launcher does, on the program's own metric through the
adaptive design; ``submitit`` (its local executor here: no Slurm on this machine) trains a
fixed design's runs to the local launcher's metrics. (Ray: ``test_launch.py``, which starts a
Ray cluster once for every test that needs one.) Each job imports plugdrop before it starts the
program, so these take tens of seconds: marked slow."""

from __future__ import annotations

from pathlib import Path

import pytest
from _programs import ablate, config, decisions, fake, folder, run_dir, starts, verdicts
from _runner_helpers import env

pytestmark = pytest.mark.slow

VARIANTS = """\
  baseline: []
  good:
    - {layers: "layer1.*", transform: Dropout, p: 0.1}
"""
#: the fake program writes only under {run_dir}: its runs may share the working directory
TEXT = config(fake(), seeds="{min: 3, max: 4}", variants=VARIANTS, extra="workdir: shared\n")
#: one round of jobs: the runs baseline__s0 and good__s0 of TEXT's ablation
FIXED = config(fake(), seeds="[0]", variants=VARIANTS, extra="workdir: shared\n")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The local launcher's ablation: its decisions are the ones to match."""
    tmp = tmp_path_factory.mktemp("local")
    with pytest.MonkeyPatch.context() as mp:
        folder(tmp, mp, TEXT)
        assert ablate() == 0
    return tmp / "out"


def same_runs(out: Path, reference: Path, runs: tuple[str, ...]) -> None:
    """Each of ``runs`` finished in ``out`` with the metrics it logged in ``reference``."""
    for run in runs:
        assert (run_dir(out, run) / "done.json").exists(), run
        assert (run_dir(out, run) / "metrics.jsonl").read_text() == \
            (run_dir(reference, run) / "metrics.jsonl").read_text()


def test_the_processes_launcher_runs_programs(tmp_path, monkeypatch, reference, capsys):
    folder(tmp_path, monkeypatch, TEXT)
    for k, v in env().items():  # the jobs import this worktree
        monkeypatch.setenv(k, v)
    assert ablate("--launcher", "processes", "--max-parallel", "2", "--cpus-per-run", "1") == 0
    out = tmp_path / "out"
    assert decisions(out) == decisions(reference)
    assert verdicts(out) == verdicts(reference) == {"baseline": "baseline", "good": "better"}
    same_runs(out, reference, ("baseline__s2", "good__s2"))
    (start,) = starts(out, "good__s0")
    assert start["gpus"] == "" and start["threads"] == "1"  # --gpus-per-run 0, --cpus-per-run 1
    assert "6 runs to train through processes" in capsys.readouterr().out


def test_the_submitit_launcher_runs_programs(tmp_path, monkeypatch, reference):
    pytest.importorskip("submitit")
    folder(tmp_path, monkeypatch, FIXED)
    for k, v in env().items():
        monkeypatch.setenv(k, v)
    assert ablate("--launcher", "submitit", "--slurm-cluster", "local", "--max-parallel",
                  "2") == 0
    out = tmp_path / "out"
    same_runs(out, reference, ("baseline__s0", "good__s0"))
    assert starts(out, "good__s0")[0]["env"]["PLUGDROP_VARIANT"] == "good"
    assert (out / ".submitit").is_dir()

"""``plugdrop search`` through the launchers that start jobs: ``--launcher processes``,
``submitit`` (its local executor: real separate processes, no Slurm needed) and ``ray`` (a local
cluster) end with the search the local launcher ends with (the race is replayed from the run
folders, whichever launcher trained them), two candidates racing at once (``parallel: 2``).
Each job imports plugdrop before it starts the program: marked slow."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _search_helpers import HERE, TEXT, local_search, same  # noqa: F401 (a fixture)
from _runner_helpers import env, ray_cluster  # noqa: F401, I001 (ray_cluster: a fixture)

from plugdrop.cli import main

pytest.importorskip("optuna")
pytestmark = pytest.mark.slow

def _search(folder: Path, mp: pytest.MonkeyPatch, *args: str) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "search_target.py", folder / "search_target.py")
    (folder / "search.yaml").write_text(TEXT)
    mp.chdir(folder)
    for k, v in env().items():  # the jobs import this worktree
        mp.setenv(k, v)
    assert main(["search", "search.yaml", "--out", "out", *args]) in (0, 1)
    return same(folder / "out")


@pytest.fixture(scope="module")
def local(local_search) -> dict:
    return same(local_search)


@pytest.mark.parametrize("launcher,flags", [
    ("processes", ["--max-parallel", "2"]),
    ("submitit", ["--slurm-cluster", "local", "--max-parallel", "2"]),
], ids=["processes", "submitit"])
def test_a_search_through_a_launcher_ends_as_the_local_one(tmp_path, monkeypatch, capsys, local,
                                                           launcher, flags):
    if launcher == "submitit":
        pytest.importorskip("submitit", reason="the slurm extra is not installed")
    got = _search(tmp_path, monkeypatch, "--launcher", launcher, *flags)
    assert got == local
    assert f"through {launcher}" in capsys.readouterr().out
    attempts = [json.loads(p.read_text().splitlines()[0])
                for p in (tmp_path / "out" / "trials" / "runs").glob("*/attempts.jsonl")]
    assert attempts and {a["launcher"] for a in attempts} == {launcher}


@pytest.mark.usefixtures("ray_cluster")
def test_a_search_through_ray_ends_as_the_local_one(tmp_path, monkeypatch, local):
    assert _search(tmp_path, monkeypatch, "--launcher", "ray", "--max-parallel", "2") == local

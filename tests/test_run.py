"""plugdrop.current_run: the run contract read by a Python training script, its variant attached
to a model, metric lines appended whole; nothing outside an ablation."""

from __future__ import annotations

import json
import os
from pathlib import Path
import threading

import numpy as np
import pytest
import torch

import plugdrop as pd

ENV = ("PLUGDROP_SEED", "PLUGDROP_VARIANT", "PLUGDROP_SPEC", "PLUGDROP_RUN_DIR",
       "PLUGDROP_METRICS", "PLUGDROP_RESUME", "PLUGDROP_RUN_ID")


@pytest.fixture
def no_run(monkeypatch):
    for k in ENV + ("RANK", "LOCAL_RANK", "NODE_RANK"):
        monkeypatch.delenv(k, raising=False)


@pytest.fixture
def run_env(tmp_path, monkeypatch, no_run):
    spec = tmp_path / "spec.yaml"
    spec.write_text('[{"layers": "layer1.*", "transform": "DropBlock", "p": 0.1, '
                    '"block_size": 3}]\n')
    (tmp_path / "work").mkdir()
    values = {"PLUGDROP_SEED": "3", "PLUGDROP_VARIANT": "dropblock",
              "PLUGDROP_SPEC": str(spec), "PLUGDROP_RUN_DIR": str(tmp_path / "work"),
              "PLUGDROP_METRICS": str(tmp_path / "metrics.jsonl"), "PLUGDROP_RESUME": "1",
              "PLUGDROP_RUN_ID": "dropblock__s3"}
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return tmp_path


def test_outside_an_ablation_there_is_no_run(no_run):
    assert pd.current_run() is None


def test_the_run_is_read_from_the_contract(run_env, net):
    run = pd.current_run()
    assert run is not None
    assert (run.seed, run.variant, run.resumed, run.run_id) == (3, "dropblock", True,
                                                                "dropblock__s3")
    assert run.run_dir == run_env / "work" and run.metrics == run_env / "metrics.jsonl"
    assert [a.transform for a in run.attachments] == ["DropBlock"]
    group = run.attach(net, steps=10)
    assert group.labels == ["DropBlock@layer1.*"]
    assert [r.layer for r in pd.summary(net)] == ["layer1.0", "layer1.1"]
    group.remove()


def test_the_baselines_spec_attaches_nothing(run_env, net, monkeypatch):
    (run_env / "spec.yaml").write_text("[]\n")
    run = pd.current_run()
    assert run is not None and run.attachments == []
    group = run.attach(net)
    assert len(group) == 0 and not pd.is_attached(net)


def test_log_appends_whole_lines(run_env):
    run = pd.current_run()
    path = run_env / "metrics.jsonl"
    path.write_bytes(b'{"epoch": 1, "score": 0.4')  # a line a killed program left half-written
    run.log(epoch=2, score=torch.tensor(0.5), loss=0.25, n=7)
    run.log(step=100, val=float("nan"))
    lines = path.read_text().splitlines()
    assert lines[0] == '{"epoch": 1, "score": 0.4'
    assert json.loads(lines[1]) == {"epoch": 2, "score": 0.5, "loss": 0.25, "n": 7}
    assert lines[2] == '{"step": 100, "val": NaN}'
    # lines written from several threads at once stay whole
    threads = [threading.Thread(target=lambda i=i: [run.log(step=i, k=j) for j in range(50)])
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(json.loads(x), dict) for x in path.read_text().splitlines()[1:])
    assert len(path.read_text().splitlines()) == 3 + 200


def test_log_takes_numbers_and_a_position(run_env):
    run = pd.current_run()
    with pytest.raises(TypeError, match="log\\(\\) needs epoch= or step="):
        run.log(score=1.0)
    with pytest.raises(TypeError, match="log\\(score=...\\) takes a number, got str"):
        run.log(epoch=1, score="high")
    with pytest.raises(TypeError, match="takes one number, got a tensor of 2 elements"):
        run.log(epoch=1, score=torch.ones(2))
    with pytest.raises(TypeError, match="log\\(epoch=...\\) takes a whole number"):
        run.log(epoch=1.5, score=1.0)
    with pytest.raises(pd.PlugdropError, match="log\\(step=-1\\): it counts from 0"):
        run.log(step=-1, score=1.0)
    with pytest.raises(pd.PlugdropError, match="log\\(''=...\\): a metric needs a name"):
        run.log(step=1, **{"": 1.0})
    with pytest.raises(TypeError, match="log\\(epoch=...\\) takes a whole number"):
        run.log(epoch=np.float64(1.0), score=1.0)
    assert not (run_env / "metrics.jsonl").exists()
    run.log(epoch=np.int64(1), step=torch.tensor(7), score=np.float32(0.5))  # NumPy, torch ints
    assert json.loads((run_env / "metrics.jsonl").read_text()) == {"epoch": 1, "step": 7,
                                                                    "score": 0.5}


def test_only_rank_zero_logs(run_env, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    pd.current_run().log(epoch=1, score=1.0)
    assert not (run_env / "metrics.jsonl").exists()
    monkeypatch.setenv("RANK", "0")
    pd.current_run().log(epoch=1, score=1.0)
    assert (run_env / "metrics.jsonl").exists()


def test_part_of_the_contract_is_one_line(run_env, monkeypatch):
    monkeypatch.delenv("PLUGDROP_METRICS")
    with pytest.raises(pd.PlugdropError, match="holds PLUGDROP_SEED but not PLUGDROP_METRICS"):
        pd.current_run()
    monkeypatch.setenv("PLUGDROP_METRICS", "m.jsonl")
    monkeypatch.setenv("PLUGDROP_SEED", "three")
    with pytest.raises(pd.PlugdropError, match="PLUGDROP_SEED='three' is not an integer"):
        pd.current_run()


def test_the_contract_names_match_the_runners():
    from plugdrop.ablate.programs import contract

    paths = contract.RunPaths(*(Path(os.devnull),) * 3)
    env = contract.environment({}, "b__s0", "b", 0, paths, False)
    assert set(pd.run.ENV) <= set(env) and env["PLUGDROP_RESUME"] == "0"

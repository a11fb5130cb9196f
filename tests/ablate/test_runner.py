"""plugdrop ablate end to end on the embedded digits at 16 px with a tiny CNN: run folders,
resume after SIGKILL equal to an uninterrupted run, SIGTERM, refused folders, the lock, a
crashing run, bf16 / EMA / gradient accumulation, TensorBoard, the dry step, torchrun."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _runner_helpers import GOOD, SMALL, cli, popen, write

from plugdrop.ablate import runs
from plugdrop.cli import main


def metrics(out: Path, run: str) -> list[dict]:
    return [json.loads(line) for line in (out / "runs" / run / "metrics.jsonl").read_text()
            .splitlines()]


@pytest.mark.slow
def test_end_to_end_run_folders(tmp_path, capsys):
    out = tmp_path / "out"
    path = write(tmp_path, GOOD.replace("seeds: [0, 1]", "seeds: [0, 1]\ndevice: cpu"))
    assert main(["ablate", str(path), "--out", str(out)]) == 0
    man = json.loads((out / "ablation.json").read_text())
    assert man["format"] == 1 and man["variants"] == ["baseline", "dropblock", "ramp"]
    assert man["baseline"] == "baseline" and man["seeds"] == [0, 1]
    assert [r["id"] for r in man["runs"]][:2] == ["baseline__s0", "baseline__s1"]
    assert man["data"]["train"] + man["data"]["val"] == 1797 and "torch" in man["versions"]
    for r in man["runs"]:
        folder = out / "runs" / r["id"]
        assert (folder / "done.json").exists() and (folder / "checkpoint.pt").exists()
        assert json.loads((folder / "run.json").read_text())["variant"] == r["variant"]
    rec = metrics(out, "ramp__s0")[-1]
    assert set(rec) >= {"epoch", "train_loss", "val_loss", "val_acc", "epoch_time",
                        "images_per_s", "lr", "step", "values", "watch"}
    assert rec["values"]["DropBlock@layer1.0/p"] == pytest.approx(0.2)  # reached its end
    # the watched value next to drop_frac is the epoch mean of the schedule, like drop_frac
    assert rec["watch"]["layer1.0/p"] == pytest.approx(0.1, abs=0.02)
    base = metrics(out, "baseline__s0")[-1]["watch"]
    drop = metrics(out, "dropblock__s0")[-1]["watch"]
    assert "layer1.0/act_std" in base and "layer1.0/drop_frac" not in base
    assert abs(drop["layer1.0/drop_frac"] - 0.1) < 0.03
    assert (out / "runs" / "dropblock__s0" / "gradcam.png").read_bytes()[:4] == b"\x89PNG"
    assert not (out / "runs" / "dropblock__s1" / "gradcam.png").exists()  # first seed only
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 3 * 2 and {"variant", "seed", "epoch", "val_acc"} <= set(rows[0])
    printed = capsys.readouterr()
    assert "baseline" in printed.out and "6 runs finished" in printed.out


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    t0 = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"exited early ({proc.returncode}): {proc.stderr.read()}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            raise AssertionError("no checkpoint appeared")
        time.sleep(0.005)


@pytest.mark.slow
def test_resume_after_sigkill_equals_uninterrupted(tmp_path, one_thread):
    text = SMALL.replace("epochs: 2", "epochs: 3") + "ema: 0.9\n"
    path = write(tmp_path, text)
    ref, out = tmp_path / "ref", tmp_path / "out"
    assert main(["ablate", str(path), "--out", str(ref)]) == 0
    proc = popen("ablate", str(path), "--out", str(out))
    _wait_for(out / "runs" / "baseline__s0" / "checkpoint.pt", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "runs" / "dropblock__s0" / "done.json").exists()
    # without --resume the folder is refused
    assert main(["ablate", str(path), "--out", str(out)]) == 2
    assert main(["ablate", str(path), "--out", str(out), "--resume"]) == 0
    for run in ("baseline__s0", "dropblock__s0"):
        a, b = metrics(ref, run), metrics(out, run)
        assert [r["epoch"] for r in b] == [1, 2, 3]
        for key in ("train_loss", "val_loss", "val_acc", "val_acc_ema", "lr", "step"):
            assert [r[key] for r in a] == [r[key] for r in b], (run, key)
        assert a[-1]["watch"] == b[-1]["watch"]


@pytest.mark.slow
def test_sigterm_stops_cleanly_and_prints_the_resume_command(tmp_path):
    path = write(tmp_path, SMALL.replace("epochs: 2", "epochs: 30"))
    out = tmp_path / "out"
    proc = popen("ablate", str(path), "--out", str(out))
    _wait_for(out / "runs" / "baseline__s0" / "checkpoint.pt", proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Resume with:" in err and "--resume" in err and str(out) in err
    assert "Traceback" not in err
    run = runs.RunDir(out, "baseline", 0)
    assert run.status == "incomplete" and run.checkpoint.exists()
    done = metrics(out, "baseline__s0")
    assert done and torch_load_epoch(run.checkpoint) == done[-1]["epoch"]


@pytest.mark.slow
def test_a_second_ctrl_c_says_the_runs_stopped_at_once(tmp_path, capsys, monkeypatch):
    """A second SIGINT interrupts the run where it is (no checkpoint at that step): the last
    line says so, not that every run kept the step it reached."""
    from plugdrop.ablate.launch import local

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(local, "execute", interrupted)
    out = tmp_path / "out"
    assert main(["ablate", str(write(tmp_path, SMALL)), "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert "plugdrop ablate: interrupted at once; every run kept its last checkpoint. " \
           "Resume with:" in err and "--resume" in err
    assert "kept the step it reached" not in err and "Traceback" not in err


def torch_load_epoch(path: Path) -> int:
    import torch

    return int(torch.load(path, weights_only=True)["epoch"])


@pytest.mark.slow
def test_folder_of_another_config_is_refused_and_locked(tmp_path, capsys):
    path = write(tmp_path, SMALL.replace("epochs: 2", "epochs: 1"))
    out = tmp_path / "out"
    assert main(["ablate", str(path), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["ablate", str(path), "--out", str(out), "--set", "lr=0.1"]) == 2
    err = capsys.readouterr().err
    assert "holds the runs of another config (differs in: lr)" in err and "--out" in err
    assert main(["ablate", str(path), "--out", str(out), "--resume"]) == 0  # nothing left
    capsys.readouterr()
    lock = runs.Lock(out)
    lock.acquire()
    try:
        assert main(["ablate", str(path), "--out", str(out), "--resume"]) == 2
        err = capsys.readouterr().err
        assert "another plugdrop ablate is writing into this folder" in err
        assert err.count("\n") == 1
    finally:
        lock.release()


@pytest.mark.slow
def test_a_crashing_run_does_not_stop_the_others(tmp_path, capsys):
    text = SMALL.replace("epochs: 2", "epochs: 1").replace("plots: false\n", (
        "  explode:\n    - {layers: fc, transform: ScaleGrad, factor: 1.0e+30}\n"
        "  last:\n    - {layers: \"layer2.*\", transform: Dropout2d, p: 0.1}\nplots: false\n"))
    out = tmp_path / "out"
    assert main(["ablate", str(write(tmp_path, text)), "--out", str(out)]) == 1
    failed = json.loads((out / "runs" / "explode__s0" / "failed.json").read_text())
    assert failed["type"] == "FloatingPointError" and "nan" in failed["error"].lower()
    assert (out / "runs" / "last__s0" / "done.json").exists()
    assert "run explode__s0 failed" in capsys.readouterr().err


@pytest.mark.slow
def test_bf16_ema_grad_accum_and_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    text = SMALL.replace("epochs: 2", "epochs: 2\namp: bf16\nema: 0.9\ngrad_accum: 2\n"
                         "optimizer: adamw\nlr: 1e-3\nwarmup_epochs: 1\nclip_grad: 5.0\n"
                         "channels_last: true\nlog: [tensorboard]")
    out = tmp_path / "out"
    assert main(["ablate", str(write(tmp_path, text)), "--out", str(out)]) == 0
    recs = metrics(out, "dropblock__s0")
    assert recs[-1]["step"] == 2 * (1438 // 128)  # grad_accum keeps the global batch
    assert 0.0 <= recs[-1]["val_acc_ema"] <= 1.0 and recs[-1]["train_loss"] < 2.5
    # one epoch of warm-up, then the cosine from the start: half-way at the end of epoch 1
    assert recs[0]["lr"] == pytest.approx(0.5e-3, rel=0.05)
    tb = out / "runs" / "dropblock__s0" / "tb"
    acc = EventAccumulator(str(tb))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"loss/train", "acc/val", "acc/val_ema", "lr"} <= set(tags)
    assert "values/DropBlock@layer1.*/p" in tags and "watch/layer1.0/drop_frac" in tags
    assert [e.step for e in acc.Scalars("acc/val")] == [1, 2]
    assert acc.Scalars("acc/val")[-1].value == pytest.approx(recs[-1]["val_acc"])


DRY = [
    ("- {layers: \"layer1.*\", transform: DropBlock, p: 0.1, block_size: 3}",
     "- {layers: \"layer1.2\", transform: ClipGradNorm, max_norm: 1.0, where: params}",
     "no parameters"),
    ("- {layers: \"layer1.*\", transform: DropBlock, p: 0.1, block_size: 3}",
     "- {layers: fc, transform: DropBlock, p: 0.1, block_size: 3}", "the dry training step"),
    ("- {layers: \"layer1.*\", transform: DropBlock, p: 0.1, block_size: 3}",
     "- {layers: \"layer1.0\", transform: DropBlock, p: 0.1, layout: tokens}",
     "the dry training step"),
    ("- {layers: \"layer1.*\", transform: DropBlock, p: 0.1, block_size: 3}",
     "- {layers: \"layer9.*\", transform: DropBlock, p: 0.1, block_size: 3}",
     "matched no module"),
]


@pytest.mark.parametrize("old,new,message", DRY, ids=["params-no-params", "dropblock-fc",
                                                      "tokens-on-cnn", "no-match"])
def test_dry_step_fails_before_training(tmp_path, capsys, old, new, message):
    path = write(tmp_path, SMALL.replace(old, new))
    out = tmp_path / "out"
    assert main(["ablate", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    line = SMALL.splitlines().index("  dropblock:") + 2  # the variant's first attachment
    assert err.startswith(f"plugdrop ablate: {path}:{line}:") and message in err, err
    assert err.count("\n") == 1 and not (out / "runs").exists()


@pytest.mark.parametrize("extra,where,message", [
    ("watch: \"layr1.*\"", ":8:", "watch:"),
    ("model_kwargs: {widht: 4}", ":8:", "widht"),
    ("gradcam: {layer: layr1}", ":8:", "gradcam layer"),
])
def test_dry_step_names_the_setting(tmp_path, capsys, extra, where, message):
    path = write(tmp_path, SMALL.replace("gradcam: false\n", extra + "\n"))
    assert main(["ablate", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{path}{where}" in err and message in err, err


@pytest.mark.slow
def test_under_torchrun_a_mistake_is_one_line_once(tmp_path):
    """Every rank reads the config; the mistake is printed once, before any traceback of
    torchrun's. (A run under torchrun, its global batch and its summary printed once:
    ``test_preemption.py::test_under_torchrun_every_rank_stops_at_the_same_step``.)"""
    path = write(tmp_path, SMALL.replace("epochs: 2", "epochs: 1"))
    bad = cli("--standalone", "--nproc_per_node", "2", "-m", "plugdrop", "ablate", str(path),
              "--out", str(tmp_path / "out"), "--set", "seeds=[true]",
              module="torch.distributed.run")  # the agent forked warm, the ranks fresh
    assert bad.returncode != 0  # a mistake never looks like success to a script
    assert bad.stderr.count("seeds must be a list of integers") == 1, bad.stderr
    ours = bad.stderr.index("plugdrop ablate: ")
    assert "Traceback" not in bad.stderr[:ours], bad.stderr[-3000:]  # ours comes first


def test_a_rank_other_than_0_ends_on_a_mistake_after_rank_0_has_said_it(monkeypatch):
    """torchrun stops every rank when the first one ends: a rank other than 0 that met the
    mistake (before the process group) waits, so a faster rank 1 no longer gets rank 0
    stopped before its line (the torchrun test above failed so, once a rank's exit got
    faster)."""
    import time
    from types import SimpleNamespace

    from plugdrop.cli import study

    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    study.rank0_first(1, 2, None)
    assert slept == [study.RANK0_FIRST_S] and study.RANK0_FIRST_S >= 5
    for rank, world, d in ((0, 2, None), (0, 1, None), (1, 2, SimpleNamespace(active=True))):
        study.rank0_first(rank, world, d)  # rank 0, one process, or after the group's barrier
    assert len(slept) == 1


@pytest.mark.slow
def test_report_command(tmp_path, capsys):
    """``plots: false`` (here through ``--set``): the ablation writes its tables, CSV, JSON
    and page but no plot; ``plugdrop report`` rebuilds them, plots included."""
    out = tmp_path / "out"
    text = SMALL.replace("epochs: 2", "epochs: 1").replace("plots: false", "plots: true")
    assert main(["ablate", str(write(tmp_path, text)), "--out", str(out), "--set",
                 "plots=false"]) == 0
    assert {p.name for p in out.iterdir() if p.is_file()} >= {
        "results.csv", "results.json", "report.html"}
    assert not list(out.glob("*.png")) and ".png" not in capsys.readouterr().out
    assert "data:image/png" not in (out / "report.html").read_text()
    (out / "results.csv").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "results.csv").exists() and "baseline" in capsys.readouterr().out
    assert (out / "val_acc.png").read_bytes()[:4] == b"\x89PNG"
    assert "data:image/png;base64" in (out / "report.html").read_text()  # inline
    assert main(["report", str(tmp_path)]) == 2


@pytest.mark.slow
def test_finetune_on_an_image_folder_with_a_corrupt_image(tmp_path, capsys):
    """Fine-tuning from a checkpoint file the test saved, on an ImageFolder tree written here
    (one image corrupt: skipped and counted), with timm augmentation and workers."""
    import timm
    import torch
    from _gen import image_folder

    root = image_folder(tmp_path / "imgs", per_class=10, corrupt=1)
    ckpt = tmp_path / "r10.pth"
    torch.manual_seed(0)
    torch.save(timm.create_model("resnet10t", num_classes=5).state_dict(), ckpt)
    text = f"""\
model: resnet10t
pretrained: {ckpt}
data: {root}
image_size: 16
bad_images: skip
workers: 1
augment: {{hflip: 0.5, scale: [0.5, 1.0]}}
epochs: 1
batch_size: 8
seeds: [0]
device: cpu
plots: false
variants:
  baseline: []
  dropblock:
    - {{layers: "layer1.*", transform: DropBlock, p: 0.1, block_size: 3}}
"""
    out = tmp_path / "out"
    assert main(["ablate", str(write(tmp_path, text)), "--out", str(out)]) == 0
    man = json.loads((out / "ablation.json").read_text())
    assert man["data"]["classes"] == ["cat", "dog", "eel"]
    assert man["config"]["pretrained"] == str(ckpt)
    state = torch.load(out / "runs" / "baseline__s0" / "checkpoint.pt", weights_only=True)
    assert state["model"]["fc.weight"].shape[0] == 3  # the head was reset to 3 classes
    assert metrics(out, "dropblock__s0")[-1]["epoch"] == 1
    # without skip, the corrupt file is named in one line
    assert main(["ablate", str(write(tmp_path, text.replace("bad_images: skip",
                                                            "bad_images: error"))),
                 "--out", str(tmp_path / "out2")]) != 0
    assert "bad0.png" in capsys.readouterr().err


def test_gradcam_layer_has_a_map_of_4x4_and_takes_tokens(tmp_path):
    import timm
    import torch

    from plugdrop.ablate import config as C
    from plugdrop.ablate.data import DataSets
    from plugdrop.ablate.train import Dist, gradcam_layer, save_gradcam

    cfg = C.load(write(tmp_path, "model: resnet10t\nvariants:\n  a:\n    - {layers: \"layer*\", "
                       "transform: Dropout2d, p: 0.1}\n"))
    cnn = timm.create_model("resnet10t", num_classes=3).eval()
    # at 32 px layer4 is 1x1 and layer3 2x2: the last regularized map of at least 4x4 is layer2
    assert gradcam_layer(cfg, cnn, torch.zeros(1, 3, 32, 32)) == "layer2"
    vit = timm.create_model("vit_tiny_patch16_224", img_size=64, depth=2, num_classes=3).eval()
    cfg = C.load(write(tmp_path, "model: vit\nvariants:\n  a:\n    - {layers: \"blocks.*\", "
                       "transform: DropPath, p: 0.1}\n"))
    x = torch.rand(2, 3, 64, 64)
    assert gradcam_layer(cfg, vit, x) == "blocks.1"  # (B, 1 + 4x4, C) tokens
    data = DataSets(torch.utils.data.TensorDataset(x, torch.tensor([0, 1])),
                    torch.utils.data.TensorDataset(x, torch.tensor([0, 1])),
                    ["a", "b", "c"], "t", True, lambda: 0)
    assert save_gradcam(cfg, vit, data, Dist(), tmp_path / "cam.png") == "blocks.1"
    assert (tmp_path / "cam.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_ablation_variant_with_manifold_mixup(tmp_path, capsys):
    text = SMALL.replace("epochs: 2", "epochs: 1").replace(
        "  dropblock:\n    - {layers: \"layer1.*\", transform: DropBlock, p: 0.1, "
        "block_size: 3}\n",
        "  manifold-mixup:\n"
        "    - {layers: ['', 'layer1', 'layer2.0'], transform: ManifoldMixup, alpha: 2.0}\n")
    out = tmp_path / "out"
    assert main(["ablate", str(write(tmp_path, text)), "--out", str(out)]) == 0
    assert "manifold-mixup" in capsys.readouterr().out
    rec = metrics(out, "manifold-mixup__s0")[-1]
    assert rec["values"]["ManifoldMixup@['', 'layer1', 'layer2.0']/alpha"] == 2.0


@pytest.mark.slow
def test_a_variant_with_two_coordinated_transforms_trains(tmp_path, capsys):
    """ManifoldMixup and PatchUp in one variant: both act, and the targets are mixed for
    what each did (plugdrop.mixed_loss), not through the first handle only."""
    text = SMALL.replace("epochs: 2", "epochs: 1").replace(
        "  dropblock:\n    - {layers: \"layer1.*\", transform: DropBlock, p: 0.1, "
        "block_size: 3}\n",
        "  mixes:\n"
        "    - {layers: ['', 'layer1'], transform: ManifoldMixup, alpha: 1.0}\n"
        "    - {layers: layer2.0, transform: PatchUp, p: 0.3, block_size: 2}\n")
    out = tmp_path / "out"
    assert main(["ablate", str(write(tmp_path, text)), "--out", str(out)]) == 0
    rec = metrics(out, "mixes__s0")[-1]
    assert rec["calls"]["PatchUp@layer2.0"] > 0
    assert rec["calls"]["ManifoldMixup@['', 'layer1']"] > 0


def test_vit_without_img_size_fails_in_the_dry_step(tmp_path, capsys):
    text = ("model: vit_tiny_patch16_224\nmodel_kwargs: {depth: 1}\nimage_size: 32\n"
            "batch_size: 64\ndevice: cpu\nvariants:\n  baseline: []\n")
    path = write(tmp_path, text)
    assert main(["ablate", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"plugdrop ablate: {path}:1:1: model 'vit_tiny_patch16_224' does not "
                          f"take 32px images") and "model_kwargs: {img_size: 32}" in err


def test_fp16_gradient_transforms_get_the_scaler(tmp_path):
    from plugdrop.ablate import config as C
    from plugdrop.ablate.execute import load_data
    from plugdrop.ablate.train import Dist, Trainer, dry_step

    text = SMALL.replace("  dropblock:\n    - {layers: \"layer1.*\", transform: DropBlock, "
                         "p: 0.1, block_size: 3}\n",
                         "  clip:\n    - {layers: fc, transform: ClipGradNorm, max_norm: 1.0, "
                         "where: params}\n") + "amp: fp16\n"
    cfg = C.load(write(tmp_path, text))
    trainer = Trainer.create(cfg, cfg.variant("clip"), 0, load_data(cfg), Dist(), 0)
    try:
        assert trainer.scaler.is_enabled()
        assert trainer.handles[0].transform.scaler is trainer.scaler
        dry_step(trainer)
    finally:
        trainer.close()


def test_a_regularizer_that_never_runs_is_refused_before_training(tmp_path, capsys):
    text = ("model: tinynet:make_with_spare\nimage_size: 8\nbatch_size: 64\ndevice: cpu\n"
            "gradcam: false\nvariants:\n  baseline: []\n  silent:\n"
            "    - {layers: spare, transform: Dropout2d, p: 0.1}\n")
    path = write(tmp_path, text)
    assert main(["ablate", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"plugdrop ablate: {path}:") and "Dropout2d never ran at 'spare'" in err
    assert not (tmp_path / "out" / "runs" / "baseline__s0" / "done.json").exists()


@pytest.mark.slow
def test_compile_setting_trains_the_compiled_model_with_its_attachments(tmp_path, capsys):
    """``compile:`` wraps the model (after attaching, so the hooks are traced with it): the
    run trains, the DropBlock inside the compiled graph runs (its calls are counted there),
    and its drop fraction is measured as in eager mode."""
    text = SMALL.replace("epochs: 2", "epochs: 1").replace(
        "gradcam: false", "gradcam: false\ncompile: {backend: aot_eager}").replace(
        "  baseline: []\n", "")  # the variant with an attachment alone: compiling costs
    out = tmp_path / "out"
    assert main(["ablate", str(write(tmp_path, text)), "--out", str(out)]) == 0
    rec = metrics(out, "dropblock__s0")[-1]
    assert rec["calls"]["DropBlock@layer1.*"] >= 2 * rec["step"]  # two layers, every step
    assert abs(rec["watch"]["layer1.0/drop_frac"] - 0.1) < 0.03
    from plugdrop.ablate import config as C
    from plugdrop.ablate.execute import load_data
    from plugdrop.ablate.train import Dist, Trainer

    cfg = C.load(write(tmp_path, text))
    assert cfg.resolved()["compile"] == {"backend": "aot_eager", "mode": None}
    trainer = Trainer.create(cfg, cfg.variant("dropblock"), 0, load_data(cfg), Dist(), 0)
    try:
        assert type(trainer.net).__name__ == "OptimizedModule" and trainer.net is not \
            trainer.model
    finally:
        trainer.close()


def test_eval_batch_size_sets_the_evaluation_batch_and_not_its_metrics(tmp_path,
                                                                       monkeypatch):
    """``eval_batch_size`` is the batch of every evaluation pass (auto: twice the training's
    micro-batch); the metrics are those of any other batch, and the config hash leaves it out
    (a resume may lower it after running out of memory)."""
    from plugdrop.ablate.execute import load_data
    from plugdrop.ablate.train import Dist, Trainer
    from plugdrop.ablate import config as C
    from plugdrop.ablate.train import trainer as trainer_module

    seen: list[int] = []
    real = trainer_module.make_loader

    def spy(*a, **k):
        if not k.get("train", True):
            seen.append(k["batch_size"])
        return real(*a, **k)

    monkeypatch.setattr(trainer_module, "make_loader", spy)
    metrics = {}
    for size in ("auto", 7, 1000):
        cfg = C.load(write(tmp_path, SMALL + f"eval_batch_size: {size}\n"))
        trainer = Trainer.create(cfg, cfg.variant("baseline"), 0, load_data(cfg), Dist(), 0)
        try:
            seen.clear()
            metrics[size] = trainer.evaluate(trainer.net)
            assert seen == [{"auto": 256, 7: 7, 1000: 1000}[size]]
        finally:
            trainer.close()
    for size in (7, 1000):
        for k in ("loss", "acc", "nll", "ece"):
            assert metrics[size][k] == pytest.approx(metrics["auto"][k], rel=1e-5, abs=1e-6), k
    a, b = (C.load(write(tmp_path, SMALL + f"eval_batch_size: {v}\n")) for v in ("auto", 9))
    assert a.hash() == b.hash()


def test_eval_every_trains_the_same_and_evaluates_every_nth_epoch_and_the_last(
        tmp_path, one_thread):
    """``eval_every: 2`` over 5 epochs evaluates after epochs 2, 4 and 5: the training (every
    epoch's loss, a DropBlock variant's masks) and the final metrics are bit for bit those of
    evaluating every epoch; the records of the other epochs have no validation metrics, and
    the report, the learning curves and TensorBoard's scalars read them."""
    from plugdrop.ablate import config as C
    from plugdrop.ablate.logging import _scalars
    from plugdrop.ablate.report import load_ablation
    from plugdrop.ablate.report.plots import plot_val_acc

    records = {}
    for every in (1, 2):
        out = tmp_path / f"every{every}"
        assert main(["ablate", str(write(tmp_path, SMALL)), "--out", str(out), "--set",
                     "epochs=5", "--set", f"eval_every={every}"]) == 0
        records[every] = {v: [json.loads(line) for line in (
            out / "runs" / f"{v}__s0" / "metrics.jsonl").read_text().splitlines()]
            for v in ("baseline", "dropblock")}
    for v in ("baseline", "dropblock"):
        every1, every2 = records[1][v], records[2][v]
        assert [r["train_loss"] for r in every1] == [r["train_loss"] for r in every2]
        assert [r["epoch"] for r in every2 if "val_acc" in r] == [2, 4, 5]
        for a, b in zip(every1, every2):
            if "val_acc" in b:
                for k in ("val_loss", "val_acc", "val_nll", "val_ece", "train_acc", "gap"):
                    assert a[k] == b[k], (v, a["epoch"], k)
            else:
                assert not {"val_loss", "val_nll", "train_acc", "gap", "calibration"} & set(b)
                assert "loss/val" not in _scalars(b) and "loss/train" in _scalars(b)
    ab = load_ablation(tmp_path / "every2")
    assert not ab.warnings and all(len(r.metrics) == 5 for r in ab.runs)
    assert plot_val_acc(ab, 0.95) is not None
    summary = {e: {r["variant"]: r for r in json.loads(
        (tmp_path / f"every{e}" / "results.json").read_text())["summary"]} for e in (1, 2)}
    for v in ("baseline", "dropblock"):
        for k in ("final_acc", "final_metric", "diff", "verdict"):
            assert summary[2][v][k] == summary[1][v][k], (v, k)
    base = C.load(write(tmp_path, SMALL))
    assert C.load(write(tmp_path, SMALL + "eval_every: 1\n")).hash() == base.hash()
    assert C.load(write(tmp_path, SMALL + "eval_every: 2\n")).hash() != base.hash()


def test_open_shows_the_verdicts_in_a_graphical_browser_or_says_where_they_are(
        tmp_path, monkeypatch):
    import webbrowser

    from plugdrop.cli.ablate import open_page

    page = tmp_path / "report.html"
    page.write_text("<h2 id=verdicts>")
    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda uri: opened.append(uri) or True)
    monkeypatch.setattr("sys.platform", "linux")
    for var in ("DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(var, raising=False)
    line = open_page(page, "verdicts")  # headless: no text browser takes the terminal
    assert not opened and line == (f"The verdicts: {page}#verdicts (no graphical web browser "
                                   f"here: open it anywhere)")
    monkeypatch.setenv("DISPLAY", ":0")
    line = open_page(page, "verdicts")
    assert opened == [page.resolve().as_uri() + "#verdicts"] and opened[0] in line
    monkeypatch.setattr(webbrowser, "open", lambda uri: False)  # a display, no browser
    assert open_page(page, "verdicts").startswith("The verdicts: ")


@pytest.mark.parametrize("value", ["0", "ten", "2.5", "''"])
def test_eval_every_mistakes_are_one_line(tmp_path, capsys, value):
    assert main(["ablate", str(write(tmp_path, SMALL)), "--list", "--set",
                 f"eval_every={value}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "eval_every" in err[0] and "an integer >= 1" in err[0], err


@pytest.mark.parametrize("value", ["0", "big", "1.5"])
def test_eval_batch_size_mistakes_are_one_line(tmp_path, capsys, value):
    assert main(["ablate", str(write(tmp_path, SMALL)), "--list", "--set",
                 f"eval_batch_size={value}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "eval_batch_size" in err[0] and "auto or an integer >= 1" in err[0]


@pytest.mark.parametrize("value,message", [
    ("nosuch", "compile: 'nosuch' is no torch.compile backend"),
    ("{backend: inductor, mode: fast}", "compile mode must be one of default"),
    ("{backend: inductor, fullgraph: true}", "compile must be true, false, a torch.compile"),
])
def test_compile_mistakes_are_one_line(tmp_path, capsys, value, message):
    assert main(["ablate", str(write(tmp_path, SMALL)), "--list", "--set",
                 f"compile={value}"]) == 2
    err = capsys.readouterr().err
    assert f"--set compile: {message}" in err and err.count("\n") == 1, err

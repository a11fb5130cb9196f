"""Golden numbers: the safety net of every refactor.

Every transform on every kernel path (``cases.py``) and a tiny seeded ablation (two variants,
two seeds, two epochs, on the embedded digits) must give the numbers stored beside this file
(``transforms.pt``, ``ablation.json``). A change that moves a number fails, naming the case and
how far it moved. A deliberate change of numbers regenerates them in a commit of its own that
says why::

    ./dev test tests/golden --update-golden

How close is equal: integer and boolean results (indices, counts, zero patterns) must be
identical. Floating-point results may differ by a few units in their last place
(:data:`RTOL`): a reduction (a norm, a convolution) sums in an order that depends on the CPU's
vector width, so another machine may round differently, while anything a change of behaviour
moves (a mask, a scale, a schedule, a seed) moves by far more. The ablation trains a float64
copy of the tiny network, so that such rounding does not grow through two epochs of training;
its images and watch statistics are float32, though, and another CPU rounds those in their last
bits (seen: 2.4e-7 relative on an AMD EPYC against numbers stored on another machine), so the
ablation's numbers are held to :data:`ABLATION_RTOL`, a few float32 units.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from cases import CASES, Case

HERE = Path(__file__).resolve().parent
TRANSFORMS = HERE / "transforms.pt"
ABLATION = HERE / "ablation.json"

#: Relative tolerance of floating-point results, per dtype (a few units in the last place).
RTOL = {torch.float64: 1e-12, torch.float32: 4e-6, torch.bfloat16: 2e-2,
        torch.float16: 4e-3}
#: Tensors up to this many elements are stored whole; of larger ones (the sizes that switch
#: the fused Dropout2d and noise kernels on) every k-th element, the count of zeros and sums.
WHOLE = 1024


def _store(path: Path, update: bool, key: str, value: Any, load: Any, save: Any) -> Any:
    """The stored value of ``key``; with ``update``, store ``value`` first."""
    data = load(path) if path.exists() else {}
    if update:
        data[key] = value
        save(path, data)
    if key not in data:
        pytest.fail(f"no golden numbers for {key!r} in {path.name}: run "
                    f"./dev test tests/golden --update-golden")
    return data[key]


def _load_pt(path: Path) -> dict[str, Any]:
    return torch.load(path, weights_only=True)


def _save_pt(path: Path, data: dict[str, Any]) -> None:
    torch.save(dict(sorted(data.items())), path)


def _kept(t: torch.Tensor) -> Any:
    """What is stored of ``t``: itself, or a sample and summary when it is large."""
    if t.numel() <= WHOLE:
        return t.clone()
    flat = t.flatten()
    step = -(-flat.numel() // WHOLE)
    return {"sample": flat[::step].clone(), "zeros": int((flat == 0).sum()),
            "sums": torch.stack([flat.double().sum(), flat.double().abs().sum()]),
            "shape": list(t.shape), "dtype": str(t.dtype)}


def _close(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """``None`` when equal (to :data:`RTOL` for floats), else what moved."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{got.dtype} {tuple(got.shape)} instead of {want.dtype} {tuple(want.shape)}"
    if not got.is_floating_point():
        n = int((got != want).sum())
        return f"{n} of {got.numel()} values differ" if n else None
    if not torch.equal(got.isnan(), want.isnan()) or not torch.equal(got == 0, want == 0):
        return "its zeros (or NaNs) moved: another mask"
    g, w = got.double().nan_to_num(), want.double().nan_to_num()
    diff = (g - w).abs()
    # An element near cancellation (a gradient summed from terms of both signs) moves by a few
    # units in the last place of the tensor's scale on another CPU (another SIMD width, another
    # summation order), not of its own: elements below a tenth of the largest are held to the
    # tolerance at that tenth.
    floor = max(1e-6 if got.dtype == torch.float32 else 1e-12, 0.1 * float(w.abs().max()))
    bad = diff > RTOL[got.dtype] * w.abs().clamp(min=floor)
    if not bad.any():
        return None
    d, g, w = (diff * bad).flatten(), g.flatten(), w.flatten()
    i = int(d.argmax())
    return (f"{int(bad.sum())} of {got.numel()} numbers moved, the most by {float(d[i]):.3g} "
            f"(flat index {i}: {float(g[i])!r} instead of {float(w[i])!r})")


def _moved(got: torch.Tensor, want: Any) -> str | None:
    if not isinstance(want, dict):
        return _close(got, want)
    mine = _kept(got)
    if mine["shape"] != want["shape"] or mine["dtype"] != want["dtype"]:
        return f"{mine['dtype']} {mine['shape']} instead of {want['dtype']} {want['shape']}"
    if mine["zeros"] != want["zeros"]:
        return f"{mine['zeros']} zeros instead of {want['zeros']}: another mask"
    moved = _close(mine["sample"], want["sample"])
    if moved is not None:
        return moved
    # The sums (in float64) of the tensor's own values: each value may move by a few units in
    # the last place of its dtype, independently, so a sum by that times the mean magnitude
    # times sqrt(n) (a random walk); one value moved by more than rounding still shows.
    n = math.prod(want["shape"])
    tol = (RTOL[getattr(torch, want["dtype"].removeprefix("torch."))]
           * float(want["sums"][1]) / math.sqrt(max(n, 1)))
    delta = (mine["sums"] - want["sums"]).abs().max()
    if float(delta) > tol:
        return (f"its sum moved by {float(delta):.3g} ({mine['sums'].tolist()} instead of "
                f"{want['sums'].tolist()})")
    return None


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_transform_numbers_are_golden(case: Case, update_golden: bool):
    got = {k: v.detach().cpu().contiguous() for k, v in case.run().items()}
    want = _store(TRANSFORMS, update_golden, case.name, {k: _kept(v) for k, v in got.items()},
                  _load_pt, _save_pt)
    assert sorted(got) == sorted(want), f"{case.name}: other outputs than the golden ones"
    moved = [f"{k}: {m}" for k in sorted(got) if (m := _moved(got[k], want[k])) is not None]
    assert not moved, f"{case.name}: " + "; ".join(moved)


def test_the_comparison_catches_a_moved_mask_and_a_moved_scale():
    """The net has holes no bigger than rounding: a different mask, a scale off by 1e-4, a
    moved index all fail."""
    x = torch.linspace(1, 2, 600).reshape(2, 3, 10, 10)
    assert _moved(x, _kept(x)) is None
    assert _moved(x * (1 + 1e-7), _kept(x)) is None  # rounding of another machine
    assert "moved" in (_moved(x * (1 + 1e-4), _kept(x)) or "")
    y = x.clone()
    y[0, 0, 0, 0] = 0
    assert "another mask" in (_moved(y, _kept(x)) or "")
    big = torch.linspace(1, 2, 70000)
    other = big.clone()
    other[5] = 0
    assert "another mask" in (_moved(other, _kept(big)) or "")
    nudged = big.clone()
    nudged[5] += 0.01  # between the sampled elements: the sums show it
    assert "sum moved" in (_moved(nudged, _kept(big)) or "")
    assert _moved(torch.tensor([1, 2]), torch.tensor([2, 1])) == "2 of 2 values differ"


# ------------------------------------------------------------------------------ the ablation

CONFIG = """\
model: tinynet:make_float64
data: digits
image_size: 8
epochs: 2
batch_size: 128
seeds: [0, 1]
device: cpu
gradcam: false
variants:
  baseline: []
  regularized:
    - {layers: "body.layer1.0", transform: DropBlock, block_size: 2,
       p: {schedule: linear, start: 0.0, end: 0.2}}
    - {layers: "body.layer2.*", transform: Dropout2d, p: 0.1}
    - {layers: body.fc, transform: ClipGradNorm, max_norm: 1.0, where: params}
    - {layers: ["", "body.layer1"], transform: ManifoldMixup, alpha: 1.0}
"""

#: measured per epoch, not computed: the only fields that may differ between runs
TIMING = ("epoch_time", "images_per_s")
#: the same in the report's summary
REPORT_TIMING = ("epoch_time", "time_vs_baseline", "epoch_time_includes_first_epoch", "run_time")
#: relative tolerance of the ablation's numbers: float64 training on float32 images, with
#: float32 watch statistics (a few float32 units in the last place; see the module's doc)
ABLATION_RTOL = 2e-6


def _records(out: Path, run: str) -> list[dict[str, Any]]:
    lines = (out / "runs" / run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]


def _compare(path: str, got: Any, want: Any, out: list[str]) -> None:
    if isinstance(want, dict) and isinstance(got, dict):
        if sorted(got) != sorted(want):
            out.append(f"{path}: keys {sorted(got)} instead of {sorted(want)}")
            return
        for k in want:
            _compare(f"{path}.{k}", got[k], want[k], out)
    elif isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        for i, (g, w) in enumerate(zip(got, want)):
            _compare(f"{path}[{i}]", g, w, out)
    elif isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        if not (math.isclose(got, want, rel_tol=ABLATION_RTOL, abs_tol=1e-12)
                or (math.isnan(got) and math.isnan(want))):
            out.append(f"{path}: {got!r} instead of {want!r}")
    elif got != want:
        out.append(f"{path}: {got!r} instead of {want!r}")


@pytest.mark.slow
def test_tiny_ablation_metrics_are_golden(tmp_path, one_thread, update_golden):
    from plugdrop.ablate import config
    from plugdrop.cli import main

    path = tmp_path / "golden.yaml"
    path.write_text(CONFIG)
    out = tmp_path / "out"
    assert main(["ablate", str(path), "--out", str(out)]) == 0
    cfg = config.load(path)
    summary = json.loads((out / "results.json").read_text())["summary"]
    got = {"config_hash": cfg.hash(),
           "runs": {f"{v}__s{s}": _records(out, f"{v}__s{s}") for v, s in cfg.runs()},
           "summary": [{k: v for k, v in row.items() if k not in REPORT_TIMING}
                       for row in summary]}
    want = _store(ABLATION, update_golden, "tiny", got,
                  lambda p: json.loads(p.read_text()),
                  lambda p, d: p.write_text(json.dumps(d, indent=1, sort_keys=True) + "\n"))
    moved: list[str] = []
    _compare("tiny", got, want, moved)
    assert not moved, "\n".join(moved[:20])


# ----------------------------------------------------------------------------- the config

#: every setting away from its default: the loader's normalization and the hash must not move
FULL = """\
model: tinynet:make
model_kwargs: {width: 4}
pretrained: false
data: {name: digits}
image_size: 12
val_fraction: 0.25
workers: 0
augment: {hflip: 0.5, scale: [0.5, 1.0], mean: 0.5}
bad_images: skip
epochs: 3
batch_size: 32
grad_accum: 2
optimizer: AdamW
lr: 1e-3
momentum: 0.5
weight_decay: 0
lr_schedule: poly
warmup_epochs: 1
warmup_lr: 1e-5
min_lr: 1e-6
label_smoothing: 0.1
clip_grad: 2
amp: bf16
channels_last: true
ema: {decay: 0.99}
seeds: [7]
device: cuda:1
out: somewhere
watch: ["layer1.*"]
gradcam: {layer: layer1.0, images: 4}
log: tensorboard
variants:
  base: ~
  grid:
    - {layers: "layer1.*", transform: DropBlock, p: {grid: [0.05, 0.1]}, block_size: 3,
       exclude: layer1.1, element: 0}
    - {layers: fc, transform: ScaleGrad, factor: {schedule: piecewise, points: {0: 1.0, 10: 0.5}},
       where: input}
  depth:
    - {layers: "layer*", transform: DropPath,
       p: {schedule: by_depth, start: 0, end: 0.1, times: {schedule: warmup, value: 1.0,
                                                            steps: 5}}}
"""


def test_config_resolution_and_hashes_are_golden(update_golden):
    from plugdrop.ablate import config

    root = HERE.parent.parent
    # "hash" is the hash as versions before 0.2 computed it (the settings that only judge in
    # it): what their folders record, which a resumed ablation recognizes; "runs_hash" is
    # today's, without them
    got = {name: {"hash": (cfg := config.load(root / "examples" / name)).judged_hash(),
                  "runs_hash": cfg.hash(), "resolved": cfg.resolved()}
           for name in ("digits.yaml", "finetune.yaml")}
    full = config.loads(FULL, "full.yaml")
    got["full"] = {"hash": full.judged_hash(), "runs_hash": full.hash(),
                   "resolved": json.loads(json.dumps(full.resolved())),
                   "runs": [list(r) for r in full.runs()], "baseline": full.baseline,
                   "grids": {v.name: dict(v.grid) for v in full.variants}}
    got = json.loads(json.dumps(got))
    want = _store(ABLATION, update_golden, "configs", got,
                  lambda p: json.loads(p.read_text()),
                  lambda p, d: p.write_text(json.dumps(d, indent=1, sort_keys=True) + "\n"))
    # A setting added since the numbers were stored is in every resolved config; at its
    # default it changes nothing, so it is compared with its default, not with the file.
    from plugdrop.ablate.config import schema

    for key, entry in got.items():
        for name in set(entry["resolved"]) - set(want.get(key, {}).get("resolved", {})):
            default = schema.resolved_default(name)
            assert entry["resolved"].pop(name) == default, f"{key}: {name} is not its default"
    moved: list[str] = []
    _compare("configs", got, want, moved)
    assert not moved, "\n".join(moved[:20])

"""plugdrop.ablate.data: digits, ImageFolder trees, torchvision classes, augmentation, bad images,
loaders (order, sharding, drop_last)."""

from __future__ import annotations


import PIL.Image
import pytest
import torch
from torch.utils.data import TensorDataset

import _gen
from plugdrop.ablate.data import (AUGMENT_KEYS, SPLIT_SEED, DataSpec, build_datasets,
                                  default_workers, make_loader, parse_data_spec)
from plugdrop.ablate.errors import ConfigError

CPU = torch.device("cpu")


def build(value, *, augment=None, model=None, bad_images="error", val_fraction=0.25):
    return build_datasets(parse_data_spec(value), image_size=16, val_fraction=val_fraction,
                          augment=augment, model=model, bad_images=bad_images)


def one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


# ----------------------------------------------------------------------------- digits

@pytest.fixture(scope="module")
def digits():
    return build("digits", val_fraction=0.2)


def test_digits_default(digits):
    assert (len(digits.train), len(digits.val)) == (1438, 359)
    assert digits.in_memory and digits.classes == [str(i) for i in range(10)]
    x, y = digits.train[0]
    assert x.shape == (3, 16, 16) and x.dtype == torch.float32 and y.dtype == torch.int64
    xt = digits.train.tensors[0]
    assert torch.allclose(xt.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5)
    assert torch.allclose(xt.std(dim=(0, 2, 3)), torch.ones(3), atol=1e-4)
    # the fixed split: validation = the first 20% of a permutation seeded with SPLIT_SEED
    from sklearn.datasets import load_digits

    perm = torch.randperm(1797, generator=torch.Generator().manual_seed(SPLIT_SEED))
    assert torch.equal(digits.val.tensors[1], torch.tensor(load_digits().target)[perm[:359]])
    assert digits.bad_images() == 0


@pytest.mark.slow
def test_the_digits_are_scikit_learns_without_importing_its_datasets():
    """Read from the file scikit-learn ships, bit for bit its ``load_digits``; a run's process
    no longer imports ``sklearn.datasets`` (about 2 s of every job)."""
    import subprocess
    import sys

    import numpy as np
    from sklearn.datasets import load_digits as sklearn_digits

    from plugdrop.ablate.data.sets import load_digits

    images, target = load_digits()
    want = sklearn_digits()
    assert images.dtype == want.images.dtype and np.array_equal(images, want.images)
    assert target.dtype == want.target.dtype and np.array_equal(target, want.target)
    code = ("import sys; from plugdrop.ablate.data.sets import load_digits; load_digits(); "
            "print('sklearn.datasets' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_digits_same_every_build(digits):
    again = build("digits", val_fraction=0.2)
    assert torch.equal(again.train.tensors[0], digits.train.tensors[0])


def test_digits_augment():
    d = build("digits", augment={"hflip": 0.5, "scale": [0.5, 1.0]}, val_fraction=0.2)
    x, y = d.train[3]
    assert x.shape == (3, 16, 16) and int(y) in range(10)
    assert isinstance(d.val, TensorDataset)


# ----------------------------------------------------------------------------- parsing

def test_parse_specs(tmp_path):
    assert parse_data_spec("digits") == DataSpec("digits", "digits")
    assert parse_data_spec({"name": "digits"}).kind == "digits"
    assert parse_data_spec(str(tmp_path)) == DataSpec("folder", str(tmp_path))
    assert parse_data_spec({"path": str(tmp_path)}).kind == "folder"
    tv = parse_data_spec({"name": "CIFAR10", "root": "/data/cifar"})
    assert (tv.kind, tv.name, tv.root) == ("torchvision", "CIFAR10", "/data/cifar")
    assert parse_data_spec({"name": "SVHN", "root": "/x", "val_split": "test"}).options == \
        {"val_split": "test"}


@pytest.mark.parametrize("value, match", [
    ("", "empty"),
    ({"root": "/x"}, "needs 'name'"),
    ({"name": "CIFAR10"}, "needs root"),
    ({"name": "CIFAR11", "root": "/x"}, "did you mean 'CIFAR10'"),
    ({"name": "MNIST", "root": "/x", "trian": True}, "MNIST has no option 'trian'"),
    ({"name": "MNIST", "root": "/x", "download": True}, "set by the runner"),
    ({"name": "digits", "root": "/x"}, "digits takes no root"),
    (3, "expected 'digits'"),
])
def test_parse_errors(value, match):
    with pytest.raises(ConfigError, match=match) as err:
        parse_data_spec(value)
    one_line(err)


# ----------------------------------------------------------------------------- folders

def test_folder_pooled_split(tmp_path):
    root = _gen.image_folder(tmp_path / "imgs")  # 3 classes x 8
    d = build(str(root))
    assert d.classes == ["cat", "dog", "eel"] and not d.in_memory
    assert (len(d.train), len(d.val)) == (18, 6)
    assert set(d.train.indices).isdisjoint(d.val.indices)
    x, y = d.val[0]
    assert x.shape == (3, 16, 16) and y in (0, 1, 2)
    assert build(str(root)).val.indices == d.val.indices  # the same split every time
    # no augment: both splits get timm's eval transform (deterministic)
    assert torch.equal(d.train[0][0], d.train[0][0])
    assert d.data_config["mean"] == pytest.approx((0.485, 0.456, 0.406))


@pytest.mark.parametrize("val_name", ["val", "valid", "validation", "test", "eval"])
def test_folder_split_names(tmp_path, val_name):
    root = _gen.split_folder(tmp_path / "d", val_name)
    d = build(str(root))
    assert d.classes == ["a", "b"]  # not ['test', 'train']
    assert (len(d.train), len(d.val)) == (12, 6)


def test_folder_only_train(tmp_path):
    _gen.image_folder(tmp_path / "d" / "train", ("a", "b"), 6)
    d = build(str(tmp_path / "d"))
    assert d.classes == ["a", "b"] and len(d.train) + len(d.val) == 12


def test_folder_lazy(tmp_path, monkeypatch):
    root = _gen.image_folder(tmp_path / "imgs")
    opened: list[str] = []
    real_open = PIL.Image.open
    monkeypatch.setattr(PIL.Image, "open", lambda fp, *a, **k: opened.append(str(fp)) or
                        real_open(fp, *a, **k))
    d = build(str(root))
    assert opened == []  # building only scans the tree
    d.train[0]
    assert len(opened) == 1


def test_folder_errors(tmp_path):
    cases = []
    cases.append((tmp_path / "nope", "does not exist"))
    (tmp_path / "file.png").write_bytes(b"x")
    cases.append((tmp_path / "file.png", "is a file"))
    (tmp_path / "empty").mkdir()
    cases.append((tmp_path / "empty", "no class folders"))
    _gen.image_folder(tmp_path / "one", ("only",), 3)
    cases.append((tmp_path / "one", "one class folder"))
    _gen.image_folder(tmp_path / "hole", ("a", "b"), 3)
    (tmp_path / "hole" / "c").mkdir()
    (tmp_path / "hole" / "c" / "notes.txt").write_text("no images here")
    cases.append((tmp_path / "hole" / "c", "has no images"))
    _gen.split_folder(tmp_path / "extra")
    _gen.image_folder(tmp_path / "extra" / "val", ("zebra",), 1)
    cases.append((tmp_path / "extra" / "val", "zebra"))
    for path, match in cases:
        with pytest.raises(ConfigError, match=match) as err:
            build(str(path) if "hole" not in str(path) and "extra" not in str(path)
                  else str(path.parent))
        assert str(path) in one_line(err)


def test_folder_suggests_torchvision(tmp_path):
    with pytest.raises(ConfigError, match=r"name: CIFAR10, root"):
        build("cifar10")


# ----------------------------------------------------------------------------- torchvision

def test_torchvision_local_root(tmp_path):
    root = _gen.fake_mnist(tmp_path / "tv")
    d = build({"name": "MNIST", "root": str(root)})
    assert (len(d.train), len(d.val)) == (20, 10) and len(d.classes) == 10
    x, y = d.train[1]
    assert x.shape == (3, 16, 16) and y == 1  # grayscale converted to RGB


def test_torchvision_missing(tmp_path):
    with pytest.raises(ConfigError, match="nothing is downloaded") as err:
        build({"name": "CIFAR10", "root": str(tmp_path)})
    assert str(tmp_path / "cifar-10-batches-py") in one_line(err)


# ----------------------------------------------------------------------------- augmentation

def test_augment_keys_and_errors(tmp_path):
    assert {"hflip", "auto_augment", "re_prob", "mean", "std", "crop_pct"} <= AUGMENT_KEYS
    root = _gen.image_folder(tmp_path / "imgs")
    with pytest.raises(ConfigError, match="did you mean 'hflip'"):
        build(str(root), augment={"hflp": 0.5})
    with pytest.raises(ConfigError, match="auto_augment"):
        build(str(root), augment={"auto_augment": "nonsense-m9"})
    with pytest.raises(ConfigError, match="mean"):
        build(str(root), augment={"mean": [0.5, 0.5]})
    d = build(str(root), augment={"auto_augment": "rand-m9-mstd0.5", "re_prob": 0.5,
                                  "mean": [0.5], "std": 0.25})
    assert d.data_config["mean"] == (0.5, 0.5, 0.5) and d.data_config["std"] == (0.25,) * 3
    assert d.train.dataset.transform is not d.val.dataset.transform
    assert d.train[0][0].shape == (3, 16, 16)


def test_normalization_follows_model(tmp_path):
    root = _gen.image_folder(tmp_path / "imgs")
    model = torch.nn.Linear(1, 1)
    model.pretrained_cfg = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5),  # type: ignore
                            "interpolation": "bilinear"}
    d = build(str(root), model=model)
    assert d.data_config["mean"] == (0.5, 0.5, 0.5)
    assert d.data_config["interpolation"] == "bilinear"
    by_name = build(str(root), model="vit_tiny_patch16_224.augreg_in21k")  # a name: no model built
    assert by_name.data_config["mean"] == (0.5, 0.5, 0.5)
    assert build(str(root), model="_gen:tiny_net").data_config["mean"] == \
        pytest.approx((0.485, 0.456, 0.406))


# ----------------------------------------------------------------------------- bad images

@pytest.fixture
def bad_tree(tmp_path):
    root = _gen.split_folder(tmp_path / "bad", train_per_class=4, val_per_class=3)
    _gen.write_corrupt(root / "val" / "a" / "broken.png")  # val: 6 good + 1 corrupt
    return root


def test_bad_image_error_with_workers(bad_tree):
    d = build(str(bad_tree))
    loader = make_loader(d.val, batch_size=2, train=False, workers=2, seed=0, epoch=0, device=CPU)
    with pytest.raises(ConfigError, match="bad_images: skip") as err:
        for _ in loader:
            pass
    assert str(bad_tree / "val" / "a" / "broken.png") in one_line(err)


def test_bad_image_error_in_process(bad_tree):
    d = build(str(bad_tree))
    loader = make_loader(d.val, batch_size=4, train=False, workers=0, seed=0, epoch=0, device=CPU)
    with pytest.raises(ConfigError, match="broken.png"):
        list(loader)


def test_bad_image_skip_counted_with_workers(bad_tree):
    d = build(str(bad_tree), bad_images="skip")
    loader = make_loader(d.val, batch_size=2, train=False, workers=2, seed=0, epoch=0, device=CPU)
    seen = sum(len(y) for _, y in loader)
    assert seen == 6 and d.bad_images() == 1
    list(loader)  # the same file again: still one unreadable image
    assert d.bad_images() == 1


# ----------------------------------------------------------------------------- loaders

def numbers(n: int) -> TensorDataset:
    return TensorDataset(torch.arange(n, dtype=torch.float32)[:, None], torch.arange(n))


def order(loader) -> list[int]:
    return [int(i) for _, y in loader for i in y]


def test_train_order_reproducible():
    ds = numbers(40)

    def run(seed, epoch):
        return order(make_loader(ds, batch_size=4, train=True, workers=0, seed=seed, epoch=epoch,
                                 device=CPU))

    assert run(0, 3) == run(0, 3)
    assert run(0, 3) != run(0, 4) and run(0, 3) != run(1, 3)
    assert sorted(run(0, 3)) == list(range(40))


def test_train_drop_last():
    loader = make_loader(numbers(19), batch_size=4, train=True, workers=0, seed=0, epoch=0,
                         device=CPU)
    sizes = [len(y) for _, y in loader]
    assert sizes == [4, 4, 4, 4]  # no batch of 3 (or 1) at the end


def test_train_sharded_over_two_ranks():
    ds = numbers(21)
    shards = [order(make_loader(ds, batch_size=2, train=True, workers=0, seed=5, epoch=1,
                                rank=r, world=2, device=CPU)) for r in range(2)]
    assert len(shards[0]) == len(shards[1]) == 10
    assert set(shards[0]).isdisjoint(shards[1])


def test_eval_sharded_keeps_everything():
    ds = numbers(11)
    shards = [make_loader(ds, batch_size=4, train=False, workers=0, seed=0, epoch=0, rank=r,
                          world=2, device=CPU) for r in range(2)]
    got = [order(s) for s in shards]
    assert sorted(got[0] + got[1]) == list(range(11))  # each sample once, none padded
    assert [len(y) for _, y in shards[1]] == [4, 2]  # the last partial batch kept


def test_folder_loader_with_workers(tmp_path):
    d = build(str(_gen.image_folder(tmp_path / "imgs")))
    loader = make_loader(d.train, batch_size=4, train=True, workers=2, seed=0, epoch=0,
                         device=CPU)
    batches = list(loader)
    assert len(batches) == 4 and batches[0][0].shape == (4, 3, 16, 16)
    assert batches[0][1].dtype == torch.int64
    again = list(make_loader(d.train, batch_size=4, train=True, workers=2, seed=0, epoch=0,
                             device=CPU))
    assert all(torch.equal(a[1], b[1]) and torch.equal(a[0], b[0]) for a, b in zip(batches, again))


def test_augmented_order_and_pixels_reproducible_with_workers(tmp_path):
    d = build(str(_gen.image_folder(tmp_path / "imgs")),
              augment={"auto_augment": "rand-m9-mstd0.5", "re_prob": 0.5})

    def run(epoch):
        return list(make_loader(d.train, batch_size=6, train=True, workers=2, seed=7, epoch=epoch,
                                device=CPU))

    a, b, c = run(0), run(0), run(1)
    assert all(torch.equal(x[0], y[0]) for x, y in zip(a, b))
    assert not all(torch.equal(x[0], y[0]) for x, y in zip(a, c))


def test_build_setting_errors(tmp_path):
    root = str(_gen.image_folder(tmp_path / "imgs", per_class=2))
    with pytest.raises(ConfigError, match="bad_images"):
        build(root, bad_images="ignore")
    with pytest.raises(ConfigError, match="val_fraction"):
        build(root, val_fraction=1.5)
    with pytest.raises(ConfigError, match="image_size"):
        build_datasets(parse_data_spec(root), image_size=0, val_fraction=0.2, augment=None,
                       model=None)


def test_loader_errors():
    with pytest.raises(ConfigError, match="batch_size"):
        make_loader(numbers(6), batch_size=8, train=True, workers=0, seed=0, epoch=0, device=CPU)
    with pytest.raises(ConfigError, match="workers"):
        make_loader(numbers(6), batch_size=2, train=True, workers=-1, seed=0, epoch=0, device=CPU)


def test_default_workers():
    assert 1 <= default_workers() <= 8


# ----------------------------------------------------------------------------- train_size

def test_train_size_draws_the_same_images_whatever_the_seed(digits):
    """``train_size`` trains on a fixed part of the training split: the same images in every
    build, whatever the global random state (a run's seed), stratified by class, normalized
    with its own statistics; the validation split stays whole."""
    from plugdrop.ablate.data.subset import draw_train

    torch.manual_seed(0)
    a = build_datasets(parse_data_spec("digits"), image_size=16, val_fraction=0.2,
                       augment=None, model=None, train_size=300)
    torch.manual_seed(1)
    b = build_datasets(parse_data_spec("digits"), image_size=16, val_fraction=0.2,
                       augment=None, model=None, train_size=300)
    assert len(a.train) == 300 and torch.equal(a.train.tensors[0], b.train.tensors[0])
    assert torch.equal(a.val.tensors[1], digits.val.tensors[1])  # validation: all 359
    full = digits.train.tensors[1].tolist()
    chosen = draw_train(full, len(full), 300, "digits")
    assert torch.equal(a.train.tensors[1], torch.tensor([full[i] for i in chosen]))
    counts = torch.bincount(a.train.tensors[1], minlength=10)
    shares = torch.bincount(digits.train.tensors[1], minlength=10) * 300 / len(full)
    assert ((counts - shares).abs() < 1).all()  # each class keeps its share
    xt = a.train.tensors[0]
    assert torch.allclose(xt.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5)
    # a fraction of the split: round(0.25 x 1438) images
    assert len(build_datasets(parse_data_spec("digits"), image_size=16, val_fraction=0.2,
                              augment=None, model=None, train_size=0.25).train) == 360


def test_draw_train_keeps_every_class():
    from plugdrop.ablate.data.subset import draw_train

    labels = [0] * 90 + [1] * 9 + [2] * 1   # a rare class keeps one image
    chosen = draw_train(labels, 100, 10, "x")
    assert chosen is not None and len(chosen) == 10 and chosen == sorted(chosen)
    assert sorted(labels[i] for i in chosen) == [0] * 8 + [1] + [2]
    assert draw_train(labels, 100, None, "x") is None
    assert draw_train(None, 100, 7, "x") == draw_train(None, 100, 7, "x")
    assert len(set(draw_train(None, 100, 100, "x"))) == 100


def test_train_size_of_folders_and_torchvision(tmp_path):
    root = str(_gen.image_folder(tmp_path / "imgs"))       # pooled: 18 train / 6 val
    full = build(root)
    part = build_datasets(parse_data_spec(root), image_size=16, val_fraction=0.25,
                          augment=None, model=None, train_size=6)
    assert len(part.train) == 6 and set(part.train.indices) <= set(full.train.indices)
    assert part.val.indices == full.val.indices
    assert sorted(part.train[i][1] for i in range(6)) == [0, 0, 1, 1, 2, 2]
    assert part.files == full.files  # the scanned list (what a resume compares) is the whole
    split = str(_gen.split_folder(tmp_path / "d"))        # train/ (12) + val/ (6)
    d = build_datasets(parse_data_spec(split), image_size=16, val_fraction=0.25, augment=None,
                       model=None, train_size=0.5)
    assert (len(d.train), len(d.val)) == (6, 6)
    assert sorted(d.train[i][1] for i in range(6)) == [0, 0, 0, 1, 1, 1]
    mnist = {"name": "MNIST", "root": str(_gen.fake_mnist(tmp_path / "tv"))}  # 20 train
    t = build_datasets(parse_data_spec(mnist), image_size=16, val_fraction=0.25, augment=None,
                       model=None, train_size=10)
    assert len(t.train) == 10 and sorted(t.train[i][1] for i in range(10)) == list(range(10))


@pytest.mark.parametrize("value, match", [
    (2000, "train_size: 2000 is more than the 1438 images of the training split of digits; "
           "give at most 1438"),
    (5, "train_size: 5 (5 images) cannot hold one image of each of the 10 classes"),
    (0, "train_size: expected a whole number of images >= 1 or a fraction in (0, 1), got 0"),
    (1.5, "got 1.5"),
    (True, "got True"),
])
def test_train_size_errors_when_the_data_is_read(value, match):
    with pytest.raises(ConfigError) as err:
        build_datasets(parse_data_spec("digits"), image_size=16, val_fraction=0.2,
                       augment=None, model=None, train_size=value)
    assert match in one_line(err)


@pytest.mark.parametrize("line, match", [
    ("train_sise: 300", "unknown setting 'train_sise' (did you mean 'train_size'?)"),
    ("train_size: 0", "train_size must be a whole number of training images >= 1 (300), a "
                      "fraction of the training split in (0, 1) (0.25), or none for all of it, "
                      "got 0"),
    ("train_size: 1.0", "got 1.0"),
    ("train_size: 300 images", "got '300 images'"),
    ("train_size: true", "got True"),
    ("train_size: [300]", "got [300]"),
])
def test_train_size_config_errors(tmp_path, line, match):
    from plugdrop.ablate import config

    path = tmp_path / "cfg.yaml"
    path.write_text(f"model: resnet10t\n{line}\nvariants:\n  baseline: []\n")
    with pytest.raises(ConfigError) as err:
        config.load(path)
    assert one_line(err).startswith(f"{path}:2:") and match in str(err.value)


def test_train_size_enters_the_hash_away_from_its_default(tmp_path):
    from plugdrop.ablate import config

    path = tmp_path / "cfg.yaml"
    path.write_text("model: resnet10t\nvariants:\n  baseline: []\n")
    plain = config.load(path)
    assert config.load(path, config.parse_overrides(["train_size=null"])).hash() == plain.hash()
    some = config.load(path, config.parse_overrides(["train_size=300"]))
    assert some.train_size == 300 and some.resolved()["train_size"] == 300
    assert some.hash() != plain.hash()
    assert config.load(path, config.parse_overrides(["train_size=0.25"])).hash() not in (
        plain.hash(), some.hash())


@pytest.mark.slow
def test_train_size_is_recorded_and_a_resume_that_changes_it_is_refused(tmp_path, capsys):
    import json

    from _runner_helpers import SMALL, write

    from plugdrop.cli import main

    path = write(tmp_path, SMALL.replace("epochs: 2", "epochs: 1\ntrain_size: 256")
                 .replace("  dropblock:\n    - {layers: \"layer1.*\", transform: DropBlock, "
                          "p: 0.1, block_size: 3}\n", ""))
    out = tmp_path / "out"
    assert main(["ablate", str(path), "--out", str(out)]) == 0
    doc = json.loads((out / "ablation.json").read_text())
    assert doc["config"]["train_size"] == 256 and doc["data"]["train"] == 256
    assert "(256 train / 359 val" in capsys.readouterr().out
    assert main(["ablate", str(path), "--out", str(out), "--resume",
                 "--set", "train_size=512"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "holds the runs of another config (differs in: train_size)" in err

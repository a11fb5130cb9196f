"""The runner's settings are declared once (``config.schema``): the loader, the checks, the
flags of ``plugdrop ablate``, the config hash and the settings reference are derived from that
one table, so a setting cannot be known to one of them and missing from another."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from _runner_helpers import GOOD, write

from plugdrop.ablate import config as C
from plugdrop.ablate.config import schema
from plugdrop.ablate.errors import ConfigError
from plugdrop.cli import build_parser, main

SETTINGS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "settings.md"


def test_every_field_of_the_config_is_a_setting_of_the_table():
    fields = {f.name for f in dataclasses.fields(C.AblationConfig)} - {"source", "locs", "origin"}
    table = C.settings()
    assert set(table) == fields
    for name, s in table.items():
        assert s.help and s.group in schema.GROUPS, name
        assert (s.check is None) == (name == "variants"), name


def test_flags_are_derived_from_the_table(tmp_path, capsys):
    from plugdrop.cli.ablate import _overrides

    flagged = {name for name, s in C.settings().items() if s.flag is not None}
    assert flagged == {"out", "epochs", "seeds", "device", "batch_size", "lr"}
    path = str(write(tmp_path, GOOD))
    args = build_parser().parse_args(["ablate", path, "--batch-size", "64", "--seeds", "3",
                                      "4", "--lr", "0.5", "--out", "o", "--epochs", "2",
                                      "--device", "cpu"])
    cfg = C.load(path, _overrides(args))
    assert (cfg.batch_size, cfg.seeds, cfg.lr, cfg.out, cfg.epochs, cfg.device) == \
        (64, (3, 4), 0.5, "o", 2, "cpu")
    assert cfg.loc("batch_size") == "--batch-size"
    assert main(["ablate", path, "--seeds", "7", "--list"]) == 0
    assert "seed=7" in capsys.readouterr().out


def test_the_hash_leaves_out_exactly_the_unhashed_settings(tmp_path):
    base = C.load(write(tmp_path, GOOD))
    changes = {"out": "elsewhere", "device": "cpu", "workers": 3, "log": "tensorboard",
               "lr": 0.1, "epochs": 2, "image_size": 12, "amp": "bf16"}
    assert {"out", "device", "workers", "log"} <= set(C.unhashed())
    for key, value in changes.items():
        other = C.load(write(tmp_path, GOOD), C.parse_overrides([f"{key}={value}"]))
        assert (other.hash() == base.hash()) == (key in C.unhashed()), key


def test_the_reference_names_every_setting_and_flag(capsys):
    text = C.reference()
    for name, s in C.settings().items():
        assert f"| `{name}` |" in text
        if s.flag is not None:
            assert f"`{C.flag_name(name)}`" in text
    assert main(["ablate", "--settings"]) == 0
    assert capsys.readouterr().out.strip() == text.strip()


def test_the_docs_hold_the_generated_reference():
    """The docs' settings page is the generated text: regenerate it with ``./dev docs`` after
    changing a setting."""
    readme = SETTINGS_PAGE.read_text()
    begin, end = readme.index(C.BEGIN_MARK), readme.index(C.END_MARK)
    assert readme[begin + len(C.BEGIN_MARK):end].strip() == C.reference().strip()


def test_no_config_is_one_line(capsys):
    assert main(["ablate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("plugdrop ablate: give the YAML config") and err.count("\n") == 1


@pytest.mark.parametrize("value,message", [
    ("{layers: layer1, transform: PatchUp, p: 0.2, block_size: 2}", None),
    ("{layers: layer2, transform: ManifoldMixup, alpha: 1.0}",
     "has 2 ManifoldMixup attachments; use one with a list of layers"),
    ("{layers: layer2, transform: PatchUp, p: 0.2, where: input}",
     "PatchUp mixes module outputs; remove 'where: input'"),
])
def test_coordinated_transforms_are_told_by_protocol(tmp_path, value, message):
    """Any coordinated transform (not a name in a list) gets the same checks; two different
    ones compose in one variant."""
    text = GOOD.replace(
        "  ramp:\n",
        f"  mix:\n    - {{layers: [layer1], transform: ManifoldMixup, alpha: 1.0}}\n"
        f"    - {value}\n  ramp:\n", 1)
    path = write(tmp_path, text)
    if message is None:
        cfg = C.load(path)
        assert [a.coordinated for a in cfg.variant("mix").attachments] == [True, True]
        assert "layer1" not in cfg.attached_layers()  # mixing layers are not watched
        return
    with pytest.raises(ConfigError, match=message) as e:
        C.load(path)
    assert str(e.value).startswith(f"{path}:")


def test_a_setting_added_later_enters_the_hash_only_away_from_its_default(tmp_path):
    """Folders of earlier versions keep resuming when a setting is added: at its default it
    is left out of the hash (``hashed=AWAY_FROM_DEFAULT``)."""
    table = dict(C.settings())
    table["lr"] = dataclasses.replace(table["lr"], hashed=schema.AWAY_FROM_DEFAULT)
    at_default = C.load(write(tmp_path, GOOD)).resolved()
    assert at_default["lr"] == schema.default("lr")
    without = {k: v for k, v in at_default.items() if k != "lr"}
    assert schema.fingerprint(at_default, table) == schema.fingerprint(without, table)
    moved = dict(at_default, lr=0.1)
    assert schema.fingerprint(moved, table) != schema.fingerprint(at_default, table)
    assert schema.fingerprint(at_default, C.settings()) == C.load(write(tmp_path, GOOD)).hash()

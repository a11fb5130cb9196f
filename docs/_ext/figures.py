"""What the docs show that the code makes, made when the docs are built (nothing generated is
kept in the repository): the pictures of the transforms' masks, drawn by the library itself with
a fixed seed, and the command line's ``--help`` texts, so both show what the code does today."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parents[1] / "_generated"


def _masks() -> list[tuple[str, torch.Tensor]]:
    import plugdrop.functional as F

    x = torch.ones(1, 3, 32, 32)
    out = []
    for title, fn in [
        ("DropBlock p=0.1, block 7", lambda: F.drop_block(x, 0.1, 7)),
        ("DropBlock p=0.1, block 3", lambda: F.drop_block(x, 0.1, 3)),
        ("DropBlock p=0.1, block 5,\nshared channels",
         lambda: F.drop_block(x, 0.1, 5, shared_channels=True)),
        ("Dropout p=0.1", lambda: F.dropout(x, 0.1)),
        ("Dropout2d p=0.3", lambda: F.dropout2d(x, 0.3)),
    ]:
        torch.manual_seed(3)
        out.append((title, (fn() != 0).float()))
    return out


def draw_masks(path: Path) -> None:
    """A grid: one row per transform, one column per channel (white: kept, black: dropped)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    masks = _masks()
    fig, axes = plt.subplots(len(masks), 3, figsize=(5.2, 1.75 * len(masks)))
    for row, (title, m) in zip(axes, masks):
        for c, ax in enumerate(row):
            ax.imshow(m[0, c].numpy(), cmap="gray", vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(title, fontsize=7, rotation=0, ha="right", va="center")
            if row is axes[0]:
                ax.set_title(f"channel {c}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: the commands whose help the command-line reference shows: file name -> (module, arguments)
COMMANDS = {
    "plugdrop": ("plugdrop.cli", []),
    "ablate": ("plugdrop.cli", ["ablate"]),
    "report": ("plugdrop.cli", ["report"]),
    "plan": ("plugdrop.cli", ["plan"]),
    "search": ("plugdrop.cli", ["search"]),
    "layers": ("plugdrop.cli", ["layers"]),
    "worker": ("plugdrop.ablate.worker", []),
}


def write_help(folder: Path) -> None:
    """``help-<name>.txt``: each command's ``--help`` at 100 columns, as ``python -m`` prints
    it (its ``main`` called here: one import of plugdrop, not one interpreter per command)."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse's width
    try:
        for name, (module, args) in COMMANDS.items():
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                try:
                    importlib.import_module(module).main([*args, "--help"])
                except SystemExit as e:
                    if e.code not in (0, None):
                        raise RuntimeError(f"{module} {args} --help exited {e.code}") from None
            (folder / f"help-{name}.txt").write_text(out.getvalue())
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def _build(app: object) -> None:
    OUT.mkdir(exist_ok=True)
    draw_masks(OUT / "masks.png")
    write_help(OUT)


def setup(app: object) -> dict[str, object]:
    OUT.mkdir(exist_ok=True)  # the site's static folder: it must exist when the config is read
    app.connect("builder-inited", _build)  # type: ignore[attr-defined]
    return {"parallel_read_safe": True, "version": "1"}

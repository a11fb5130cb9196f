"""What the docs show that the code makes, made when the docs are built (nothing generated is
kept in the repository): the pictures of the transforms' masks, drawn by the library itself with
a fixed seed, and the command line's ``--help`` texts, so both show what the code does today."""

from __future__ import annotations

import os
import subprocess
import sys
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


#: the commands whose help the command-line reference shows: file name -> arguments
COMMANDS = {
    "plugdrop": ["-m", "plugdrop"],
    "ablate": ["-m", "plugdrop", "ablate"],
    "report": ["-m", "plugdrop", "report"],
    "plan": ["-m", "plugdrop", "plan"],
    "search": ["-m", "plugdrop", "search"],
    "layers": ["-m", "plugdrop", "layers"],
    "worker": ["-m", "plugdrop.ablate.worker"],
}


def write_help(folder: Path) -> None:
    """``help-<name>.txt``: each command's ``--help`` at 100 columns."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "COLUMNS": "100",
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    for name, args in COMMANDS.items():
        out = subprocess.run([sys.executable, *args, "--help"], capture_output=True, text=True,
                             env=env, timeout=120, check=True)
        (folder / f"help-{name}.txt").write_text(out.stdout)


def _build(app: object) -> None:
    OUT.mkdir(exist_ok=True)
    draw_masks(OUT / "masks.png")
    write_help(OUT)


def setup(app: object) -> dict[str, object]:
    OUT.mkdir(exist_ok=True)  # the site's static folder: it must exist when the config is read
    app.connect("builder-inited", _build)  # type: ignore[attr-defined]
    return {"parallel_read_safe": True, "version": "1"}

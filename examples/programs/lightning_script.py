"""A PyTorch Lightning script that becomes a ``plugdrop ablate`` program by one callback.

``Regularize()`` (no spec) attaches the ablation run's variant to the LightningModule when
fitting starts and logs every validation's ``callback_metrics`` (here ``val_loss`` and
``val_acc``) into the run; the script takes the run's seed and keeps its checkpoints in the
run's own folder, resuming from ``last.ckpt`` when the run was interrupted. Run on its own, the
callback attaches nothing (and says so) and the script trains as before.

    python examples/programs/lightning_script.py
    plugdrop ablate examples/programs/lightning_script.yaml --out runs/lightning
"""

import argparse
import warnings

import lightning.pytorch as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits

import plugdrop as pd
from plugdrop.integrations.lightning import Regularize


class Digits(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2))
        self.head = nn.Linear(32 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def loaders() -> tuple[torch.utils.data.DataLoader, torch.utils.data.DataLoader]:
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target)
    data = torch.utils.data.TensorDataset(x, y)
    train, val = torch.utils.data.random_split(data, [1400, len(data) - 1400],
                                               generator=torch.Generator().manual_seed(0))
    return (torch.utils.data.DataLoader(train, batch_size=64, shuffle=True),
            torch.utils.data.DataLoader(val, batch_size=256))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0, help="when run on its own")
    args = p.parse_args()
    warnings.filterwarnings("ignore", ".*does not have many workers.*")

    run = pd.current_run()  # None on its own
    L.seed_everything(run.seed if run else args.seed, verbose=False)
    root = run.run_dir if run else "lightning_runs"
    trainer = L.Trainer(
        max_epochs=args.epochs, accelerator="cpu", devices=1, default_root_dir=root,
        logger=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[Regularize(),  # the ablation's variant in, the validations' metrics out
                   L.callbacks.ModelCheckpoint(dirpath=root, save_last=True)])
    last = run.run_dir / "last.ckpt" if run else None
    train, val = loaders()
    trainer.fit(Digits(), train, val,
                ckpt_path=str(last) if run and run.resumed and last.exists() else None)
    print(f"val_acc {float(trainer.callback_metrics['val_acc']):.4f}")


if __name__ == "__main__":
    main()

"""A Hugging Face ``Trainer`` script that becomes a ``plugdrop ablate`` program by one
callback.

A small ViT built from a config (no download) classifies scikit-learn's digits.
``Regularize().add_to(trainer)`` (no spec) attaches the ablation run's variant to the model when
training starts and logs every evaluation's metrics (``eval_loss``, ``eval_accuracy``) into the
run; the script takes the run's seed, writes its checkpoints into the run's own folder and
resumes from the last one when the run was interrupted. On its own it trains as before.

    python examples/programs/hf_trainer.py
    plugdrop ablate examples/programs/hf_trainer.yaml --out runs/hf
"""

import argparse
import os
import warnings

import numpy as np
import torch
import transformers
from sklearn.datasets import load_digits

import plugdrop as pd
from plugdrop.integrations.transformers import Regularize


class Digits(torch.utils.data.Dataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.x[i], "labels": self.y[i]}


def accuracy(pred: transformers.EvalPrediction) -> dict[str, float]:
    return {"accuracy": float((np.argmax(pred.predictions, -1) == pred.label_ids).mean())}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--seed", type=int, default=0, help="when run on its own")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()

    run = pd.current_run()  # None on its own
    seed = run.seed if run else args.seed
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train, val = order[:1400], order[1400:]
    transformers.set_seed(seed)
    model = transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=8, patch_size=2, num_channels=1, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, num_labels=10))
    out = str(run.run_dir) if run else "hf_runs"
    trainer = transformers.Trainer(
        model=model, compute_metrics=accuracy,
        train_dataset=Digits(x[train], y[train]), eval_dataset=Digits(x[val], y[val]),
        args=transformers.TrainingArguments(
            output_dir=out, num_train_epochs=args.epochs, per_device_train_batch_size=32,
            learning_rate=5e-3, eval_strategy="epoch", save_strategy="epoch",
            save_total_limit=1, report_to=[], use_cpu=True, seed=seed, disable_tqdm=True,
            logging_strategy="epoch", dataloader_num_workers=0))
    Regularize().add_to(trainer)  # the ablation's variant in, the evaluations' metrics out
    resume = run is not None and run.resumed and any(
        d.startswith("checkpoint-") for d in os.listdir(out))
    trainer.train(resume_from_checkpoint=True if resume else None)
    print(trainer.evaluate())


if __name__ == "__main__":
    main()

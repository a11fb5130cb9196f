"""Retrofit regularization onto a timm model inside your own training loop.

A timm ConvNeXt (which has no ``drop_block_rate`` argument) gets DropBlock on its stage 2 blocks
with a linear ramp bound to the optimizer, drop-path on every block's MLP branch, and per-layer
gradient clipping on the classifier, all without editing the model. Trains 2 epochs on
scikit-learn's bundled digits (no download), checkpoints, and shows that the checkpoint loads
into the bare model.

    python examples/timm_training_loop.py
"""

import io

import timm
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

import plugdrop as pd

torch.manual_seed(0)
digits = load_digits()
x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
x = F.interpolate(x, size=(32, 32), mode="bilinear").expand(-1, 3, -1, -1).contiguous()
y = torch.tensor(digits.target)
x_train, y_train, x_val, y_val = x[:1500], y[:1500], x[1500:], y[1500:]

model = timm.create_model("convnext_atto", pretrained=False, num_classes=10)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
epochs, batch = 2, 64
steps = epochs * (len(x_train) // batch)

# Which modules are there? `plugdrop layers convnext_atto --input-size 3 32 32` prints the tree;
# select() is the same dry run in Python.
print("stage 2 blocks:", pd.select(model, "stages.2.blocks.*"))

handles = [
    pd.attach(model, "stages.2.blocks.*",
              pd.DropBlock(pd.linear(0.0, 0.1, steps=steps), block_size=1)).bind(optimizer),
    pd.attach(model, "stages.*.blocks.*.mlp", pd.DropPath(0.05)),
    pd.attach(model, "head.fc", pd.ClipGradNorm(1.0), where="params"),
]

for epoch in range(epochs):
    model.train()
    perm = torch.randperm(len(x_train))
    for i in range(0, len(perm) - batch + 1, batch):
        idx = perm[i:i + batch]
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()  # also steps the DropBlock ramp
    model.eval()
    with torch.no_grad():
        acc = (model(x_val).argmax(1) == y_val).float().mean().item()
    print(f"epoch {epoch + 1}: loss {loss.item():.3f}  val acc {100 * acc:.1f}%  "
          f"DropBlock p = {handles[0].transform.p:.3f}")

print()
print(pd.summary(model))

# Checkpoints are those of the bare model: no keys were added.
buf = io.BytesIO()
torch.save({"model": model.state_dict(), "schedule": handles[0].state_dict()}, buf)
buf.seek(0)
bare = timm.create_model("convnext_atto", pretrained=False, num_classes=10)
state = torch.load(buf)
bare.load_state_dict(state["model"])
bare.eval()
with torch.no_grad():
    same = torch.equal(bare(x_val), model(x_val))
print("\ncheckpoint loads into the bare model, same eval outputs:", same)
for h in handles:
    h.remove()

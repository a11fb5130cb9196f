"""plugdrop quick start: DropBlock on stages 3 and 4 of a timm ResNet, ramped over training.

Run it with ``python examples/quickstart.py`` inside the venv (``./dev demo`` is the ablation demo). It trains a
few steps on synthetic images, so it needs no download and runs in seconds on a CPU.
"""

import torch
import timm

import plugdrop as pd

torch.manual_seed(0)
model = timm.create_model("resnet18", pretrained=False, num_classes=10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

# Which layers would a selector pick? A dry run:
print("layer3.* and layer4.* pick:", pd.select(model, ["layer3.*", "layer4.*"]))

# DropBlock with p ramped from 0 to 0.1 over 20 optimizer steps, 3x3 blocks, and the
# gradient flowing into the classifier's input clipped per sample.
steps = 20
drop = pd.attach(model, ["layer3.*", "layer4.*"],
                 pd.DropBlock(pd.linear(0.0, 0.1, steps=steps), block_size=3)).bind(optimizer)
clip = pd.attach(model, "fc", pd.ClipGradNorm(1.0), where="input")

x = torch.randn(32, 3, 64, 64)
y = torch.randint(0, 10, (32,))
model.train()
for step in range(steps):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()  # also advances the DropBlock schedule
    if step % 5 == 0 or step == steps - 1:
        print(f"step {step:2d}  loss {loss.item():.4f}  DropBlock p = {drop.transform.p:.3f}")

print()
print(pd.summary(model))

# In eval mode the transforms do nothing: the outputs are exactly those of the bare model.
model.eval()
with torch.no_grad():
    with_hooks = model(x)
    pd.detach(model)  # everything plugdrop attached is gone
    bare = model(x)
print("\neval outputs identical with and without attachments:", torch.equal(with_hooks, bare))
print("attachments left after detach:", len(pd.summary(model)))

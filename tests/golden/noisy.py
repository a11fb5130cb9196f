"""The golden studies' training program: the standard library only, one record per run.

Its metric ``score`` is ``0.5`` plus the sum over the spec's attachments of ``+p`` for a
Dropout, ``-p`` for a DropBlock and ``+0.02 * std`` for a GaussianNoise, plus noise the seed
shares with every variant (sd 0.02, cancelled by pairing) and noise of the run's own (sd
0.004), both drawn from string-seeded generators (the same numbers on every machine).
"""

import json
import os
import random
import sys

EFFECT = {"Dropout": 1.0, "DropBlock": -1.0}


def write_receipt(spec: list, calls: int) -> None:
    """The run contract's receipt (PLUGDROP_RECEIPT), as a program in any language writes it:
    what it attached and how often the hooks ran (here: once per "epoch")."""
    path = os.environ.get("PLUGDROP_RECEIPT")
    if path and spec:
        with open(path, "w") as f:
            json.dump({"by": "fake", "attachments": [
                {"label": f"{a['transform']}@{a['layers']}", "layers": [str(a["layers"])],
                 "calls": calls} for a in spec]}, f)


def main() -> int:
    env = os.environ
    seed = int(env["PLUGDROP_SEED"])
    with open(env["PLUGDROP_SPEC"]) as f:
        spec = json.load(f)
    effect = sum(a.get("p", 0.0) * EFFECT.get(a["transform"], 0.0)
                 + 0.02 * a.get("std", 0.0) * (a["transform"] == "GaussianNoise") for a in spec)
    shared = random.Random(f"seed-{seed}").gauss(0.0, 0.02)
    own = random.Random(f"{seed}-{json.dumps(spec, sort_keys=True)}").gauss(0.0, 0.004)
    score = 0.5 + effect + shared + own
    with open(env["PLUGDROP_METRICS"], "a") as f:
        f.write(json.dumps({"epoch": 1, "score": round(score, 9)}) + "\n")
    write_receipt(spec, 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

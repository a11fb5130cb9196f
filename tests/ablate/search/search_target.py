"""A training program for the tests of ``plugdrop search``: the standard library only, one
"epoch" in milliseconds, the run contract read by hand.

Its metric ``score`` is a known function of the first attachment of its spec plus noise:
``0.5 + GAIN[stage] * exp(-((p - 0.12) / 0.06) ** 2) + 0.002 [block_size == 5]``, the stage
read from ``layers`` (``layer1.*`` ... ``layer4.*``), plus noise of the seed that every variant
shares (sd 0.02, cancelled by pairing) and noise of the run's own (sd 0.003). The optimum:
``layer3.*`` at ``p = 0.12`` (+0.032 over the baseline). ``SEARCH_TARGET_FLAT=1`` makes every
spec score as the baseline (no true effect).
"""

import json
import math
import os
import random
import sys

GAIN = {"layer1": 0.0, "layer2": 0.005, "layer3": 0.03, "layer4": 0.012}
PEAK, WIDTH = 0.12, 0.06


def effect(spec):
    if not spec or os.environ.get("SEARCH_TARGET_FLAT") == "1":
        return 0.0
    a = spec[0]
    stage = str(a.get("layers", "")).split(".")[0]
    p = float(a.get("p", 0.0))
    bonus = 0.002 if a.get("block_size") == 5 else 0.0
    return GAIN.get(stage, 0.0) * math.exp(-((p - PEAK) / WIDTH) ** 2) + bonus


def write_receipt(spec, calls):
    """The run contract's receipt (PLUGDROP_RECEIPT), as a program in any language writes it:
    what it attached and how often the hooks ran."""
    path = os.environ.get("PLUGDROP_RECEIPT")
    if path and spec:
        with open(path, "w") as f:
            json.dump({"by": "search_target", "attachments": [
                {"label": f"{a['transform']}@{a['layers']}", "layers": [str(a["layers"])],
                 "calls": calls} for a in spec]}, f)


def main():
    env = os.environ
    seed = int(env["PLUGDROP_SEED"])
    with open(env["PLUGDROP_SPEC"]) as f:
        spec = json.load(f)
    shared = random.Random(f"seed-{seed}").gauss(0.0, 0.02)
    own = random.Random(f"{seed}-{json.dumps(spec, sort_keys=True)}").gauss(0.0, 0.003)
    score = 0.5 + effect(spec) + shared + own
    with open(env["PLUGDROP_METRICS"], "a") as f:
        f.write(json.dumps({"epoch": 1, "score": round(score, 9)}) + "\n")
    write_receipt(spec, 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

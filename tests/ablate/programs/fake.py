"""A training program for the tests of ``program:``: the standard library only, a few
"epochs" of fake work in well under a second, the run contract read by hand (it imports
nothing of plugdrop).

Its metric ``score`` is 0.5 plus each Dropout attachment's p minus each DropBlock
attachment's p (read from PLUGDROP_SPEC), plus noise of the seed shared by every variant and
a little of the variant's own; ``loss`` is 1 - score. It checkpoints each epoch into
PLUGDROP_RUN_DIR and resumes from there when PLUGDROP_RESUME=1, and records every start in
PLUGDROP_RUN_DIR/starts.jsonl. Options make it misbehave (see ``--help``).
"""

import argparse
import json
import math
import os
import signal
import sys
import time


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
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds of 'work' per epoch")
    p.add_argument("--when", default="", help="misbehave only for this variant (default: all)")
    p.add_argument("--fail", type=int, default=0, help="exit with this status after epoch 1")
    p.add_argument("--kill-self", action="store_true", help="SIGKILL itself after epoch 1")
    p.add_argument("--hang", action="store_true", help="sleep forever after epoch 1")
    p.add_argument("--nan", action="store_true", help="log score NaN at the last epoch")
    p.add_argument("--no-score", action="store_true", help="log loss only")
    p.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM")
    p.add_argument("--once", default="", help="misbehave only when this file does not exist "
                                              "yet (it is created)")
    p.add_argument("--seed")
    p.add_argument("--echo", nargs="*", default=[], help="arguments only recorded")
    args = p.parse_args()

    env = os.environ
    seed, variant = int(env["PLUGDROP_SEED"]), env["PLUGDROP_VARIANT"]
    run_dir, metrics = env["PLUGDROP_RUN_DIR"], env["PLUGDROP_METRICS"]
    resumed = env["PLUGDROP_RESUME"] == "1"
    if args.seed is not None:
        assert int(args.seed) == seed, (args.seed, seed)
    with open(env["PLUGDROP_SPEC"]) as f:
        spec = json.load(f)  # YAML written as JSON: a JSON reader reads it
    effect = sum(a.get("p", 0.0) * {"Dropout": 1.0, "DropBlock": -1.0}.get(a["transform"], 0.0)
                 for a in spec)
    misbehave = args.when in ("", variant)
    if args.once:
        if os.path.exists(args.once):
            misbehave = False
        elif misbehave:
            open(args.once, "w").close()
    if args.ignore_term and misbehave:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    state_path = os.path.join(run_dir, "state.json")
    start = 1
    if resumed and os.path.exists(state_path):
        with open(state_path) as f:
            start = json.load(f)["epoch"] + 1
    with open(os.path.join(run_dir, "starts.jsonl"), "a") as f:
        f.write(json.dumps({"resumed": resumed, "from": start, "pid": os.getpid(),
                            "cwd": os.getcwd(), "argv": sys.argv[1:],
                            "env": {k: v for k, v in env.items() if k.startswith("PLUGDROP_")},
                            "gpus": env.get("CUDA_VISIBLE_DEVICES"),
                            "threads": env.get("OMP_NUM_THREADS")})
                + "\n")
    with open(os.path.join(run_dir, "spec.copy"), "w") as f:
        json.dump(spec, f)

    noise = ((seed * 7919) % 13 - 6) / 100 + ((seed * 31 + len(variant) * 17) % 7 - 3) / 2000
    for epoch in range(start, args.epochs + 1):
        time.sleep(args.sleep)
        score = 0.5 + effect + noise + 0.01 * epoch
        rec = {"epoch": epoch, "loss": round(1 - score, 6)}
        if not args.no_score or not misbehave:
            rec["score"] = float("nan") if args.nan and misbehave and epoch == args.epochs \
                else round(score, 6)
        with open(metrics, "a") as f:
            f.write(json.dumps(rec) + "\n")
        with open(state_path + ".tmp", "w") as f:
            json.dump({"epoch": epoch}, f)
        os.replace(state_path + ".tmp", state_path)
        write_receipt(spec, epoch)
        print(f"epoch {epoch}: score {rec.get('score')}", flush=True)
        if epoch == 1 and misbehave:
            if args.fail:
                print("Traceback (most recent call last):", file=sys.stderr)
                print('  File "fake.py", line 1, in <module>', file=sys.stderr)
                print(f"RuntimeError: boom in {variant} seed {seed}", file=sys.stderr)
                return args.fail
            if args.kill_self:
                os.kill(os.getpid(), signal.SIGKILL)
            if args.hang:
                while True:
                    time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Wall time of one small ablation (4 runs: 2 variants x 2 seeds of a tiny CNN on the digits)
through each launcher, and each launcher's start-up cost per run.

    PYTHONPATH=.:tests python benchmarks/bench_launchers.py [--epochs 2] [--markdown FILE]

Part 1, 4 runs on 2 CPUs:
  * ``local``: one process, runs one after another, torch using both CPUs;
  * ``ray``: ``--launcher ray --cpus-per-run 1`` (a local Ray cluster, started by the command);
  * ``shards``: ``--shard 1/2`` and ``--shard 2/2`` at once, one thread each;
  * ``submitit``: ``--launcher submitit --slurm-cluster local --max-parallel 2 --cpus-per-run 1``
    (each job's controller and task forked from the warm server);
  * ``processes``: ``--launcher processes --max-parallel 2 --cpus-per-run 1`` (each run forked
    from the warm server).

Part 2, overhead per run: the same launchers with one run at a time and one thread
(``--max-parallel 1``), minus the local runner with one thread, divided by the 4 runs: the
seconds each run pays for its job (a process start, imports, loading the data again, the
cluster start spread over the runs); ``processes`` and ``submitit`` both warm and fresh
(``PLUGDROP_WARM_START=0``).

``--only NAME,NAME``: measure these entries only (e.g. ``local 1 thread,processes serial,processes
fresh serial``).

Each command is timed once, end to end (``plugdrop ablate`` starting to exiting), so the figures
include the driver's own start-up and dry step; on a shared machine they are noisy: read them as
ratios.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CFG = """\
model: tinynet:make
data: digits
image_size: 16
epochs: {epochs}
batch_size: 64
seeds: [0, 1]
device: cpu
gradcam: false
variants:
  baseline: []
  dropblock:
    - {{layers: "layer1.*", transform: DropBlock, p: 0.1, block_size: 3}}
"""


def _env(threads: int | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    else:
        env.pop("OMP_NUM_THREADS", None)
    return env


def _ablate(cfg: Path, out: Path, *flags: str, threads: int | None = None, warm: bool = True
            ) -> subprocess.Popen:
    env = dict(_env(threads), PLUGDROP_WARM_START="1" if warm else "0")
    return subprocess.Popen([sys.executable, "-m", "plugdrop", "ablate", str(cfg), "--out",
                             str(out), *flags], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def timed(*procs: subprocess.Popen) -> float:
    """Wait for ``procs`` (started just before); the seconds until the last one ended."""
    t0 = time.perf_counter()
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"bench_launchers: a command failed:\n{err[-2000:]}")
    return time.perf_counter() - t0


def measure(epochs: int, only: set[str] | None = None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        cfg = tmp / "cfg.yaml"
        cfg.write_text(CFG.format(epochs=epochs))
        o = lambda name: tmp / name.replace(" ", "-")  # noqa: E731
        sub, serial = ("--slurm-cluster", "local"), ("--max-parallel", "1", "--cpus-per-run", "1")
        commands = {
            "local": lambda n: [_ablate(cfg, o(n))],
            "ray": lambda n: [_ablate(cfg, o(n), "--launcher", "ray", "--cpus-per-run", "1")],
            "shards": lambda n: [_ablate(cfg, o(n), "--shard", f"{i}/2", threads=1)
                                 for i in (1, 2)],
            "submitit": lambda n: [_ablate(cfg, o(n), "--launcher", "submitit", *sub,
                                           "--max-parallel", "2", "--cpus-per-run", "1")],
            "processes": lambda n: [_ablate(cfg, o(n), "--launcher", "processes",
                                            "--max-parallel", "2", "--cpus-per-run", "1")],
            "local 1 thread": lambda n: [_ablate(cfg, o(n), threads=1)],
            "ray serial": lambda n: [_ablate(cfg, o(n), "--launcher", "ray", *serial,
                                             threads=1)],
            "submitit serial": lambda n: [_ablate(cfg, o(n), "--launcher", "submitit", *sub,
                                                  *serial, threads=1)],
            "submitit fresh serial": lambda n: [_ablate(cfg, o(n), "--launcher", "submitit",
                                                        *sub, *serial, threads=1, warm=False)],
            "processes serial": lambda n: [_ablate(cfg, o(n), "--launcher", "processes",
                                                   *serial, threads=1)],
            "processes fresh serial": lambda n: [_ablate(cfg, o(n), "--launcher", "processes",
                                                         *serial, threads=1, warm=False)],
            "shard serial": lambda n: [_ablate(cfg, o(n), "--shard", "1/1", threads=1)],
        }
        unknown = (only or set()) - set(commands)
        if unknown:
            raise SystemExit(f"bench_launchers: --only {sorted(unknown)}: choose among "
                             f"{', '.join(commands)}")
        return {name: timed(*start(name)) for name, start in commands.items()
                if only is None or name in only}


def markdown(t: dict[str, float], epochs: int) -> str:
    lines = [f"4 runs (tinynet, digits at 16 px, {epochs} epochs) on {os.cpu_count()} CPUs, "
             f"one measurement each:", ""]
    if "local" in t:
        lines += ["| launcher | wall time | vs local |", "|---|---|---|"]
        for name, label in (("local", "local (sequential, 2 threads)"),
                            ("ray", "ray, 1 CPU per run"),
                            ("shards", "--shard 1/2 + --shard 2/2 at once"),
                            ("submitit", "submitit local executor (warm), 2 at once"),
                            ("processes", "processes (warm), 2 at once")):
            if name in t:
                lines.append(f"| {label} | {t[name]:.1f} s | {t[name] / t['local']:.2f}x |")
    if "local 1 thread" in t:
        lines += ["", "Start-up cost per run (one run at a time, 1 thread, minus the local "
                      "runner with 1 thread, / 4 runs):", "",
                  "| launcher | overhead per run |", "|---|---|"]
        for name, label in (("shard serial", "shard"), ("ray serial", "ray"),
                            ("submitit serial", "submitit local (warm)"),
                            ("submitit fresh serial", "submitit local, fresh interpreters"),
                            ("processes serial", "processes (warm)"),
                            ("processes fresh serial", "processes, fresh interpreters")):
            if name in t:
                lines.append(f"| {label} | {(t[name] - t['local 1 thread']) / 4:+.1f} s |")
        lines.append(f"\n(local with 1 thread: {t['local 1 thread']:.1f} s)")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--markdown", type=Path, help="also write the table to this file")
    p.add_argument("--only", help="comma-separated entries to measure (default: all)")
    args = p.parse_args()
    only = {x.strip() for x in args.only.split(",")} if args.only else None
    text = markdown(measure(args.epochs, only), args.epochs)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()

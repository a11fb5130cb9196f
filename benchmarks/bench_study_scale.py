"""The study driver's own cost as a study grows: ablations of an instant stdlib program (it
writes its metric line and exits) of 100, 1,000 and 10,000 runs (100 variants x 1, 10 and 100
seeds), through the local and the processes launchers.

    PYTHONPATH=. python benchmarks/bench_study_scale.py [--runs 100,1000,10000]
        [--launchers local,processes] [--markdown benchmarks/SCALE.md] [--root DIR]

For each size and launcher, ``plugdrop ablate`` runs in a process of its own, watched from
outside (its CPU from ``/proc/PID/stat``: the driver's own threads, not the programs it
starts; the runs ended, from the run folders), so the watching costs the driver nothing:

* the driver's CPU time per run over the first and the last tenth of the runs (runs 1% to
  11% and 89% to 99% of the count: the start-up before the first run and the final report
  after the last are no run's cost), and their ratio (flat: 1.0; a driver that re-reads every
  run per run: growing with the runs);
* the driver's CPU per run over the whole ablation, its wall time, its peak resident memory;
* ``--resume`` of the finished folder (it trains nothing, rebuilds the report): wall seconds;
* ``plugdrop report`` on the folder: wall seconds; the size of ``report.html``.

A benchmark, not a test: on a shared machine, read the figures as ratios and repeat them. The
programs run for real (a Python interpreter each, with ``-S``), so the wall time is mostly
theirs; the driver's CPU is what the study loop costs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = 100

PROGRAM = """\
import json, os
seed = int(os.environ["PLUGDROP_SEED"])
h = (seed * 7919 + sum(map(ord, os.environ["PLUGDROP_VARIANT"])) * 31) % 1000
with open(os.environ["PLUGDROP_METRICS"], "a") as f:
    f.write(json.dumps({"step": 1, "score": 0.5 + h / 10000.0}) + "\\n")
"""


def config(home: Path, runs: int) -> Path:
    seeds = max(1, runs // VARIANTS)
    variants = "  baseline: []\n" + "".join(
        f"  v{i:03d}: [{{layers: \"layer1.*\", transform: Dropout, p: {0.001 * i:.3f}}}]\n"
        for i in range(1, VARIANTS))
    (home / "instant.py").write_text(PROGRAM)
    cfg = home / "scale.yaml"
    cfg.write_text(f"program: [{sys.executable}, -S, instant.py]\n"
                   f"decide_on: {{metric: score, goal: max}}\nmargin: 0.005\n"
                   f"seeds: {list(range(seeds))}\nplots: false\nreceipt: false  # attaches nothing\n"
                   f"variants:\n{variants}")
    return cfg


def _cpu(pid: int) -> float | None:
    """The seconds of CPU process ``pid``'s own threads used (user + system)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _ended(out: Path) -> int:
    try:
        return sum(1 for d in os.scandir(out / "runs")
                   if os.path.exists(os.path.join(d.path, "done.json"))
                   or os.path.exists(os.path.join(d.path, "failed.json")))
    except FileNotFoundError:
        return 0


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")]))


def ablate(home: Path, runs: int, launcher: str, every: float = 0.25) -> dict[str, object]:
    """One ablation, watched: CPU samples ``(runs ended, driver CPU)``, wall, peak memory."""
    cfg = config(home, runs)
    out = home / "out"
    args = [sys.executable, "-m", "plugdrop", "ablate", str(cfg), "--out", str(out)]
    if launcher != "local":
        args += ["--launcher", launcher, "--cpus-per-run", "1"]
    t0 = time.monotonic()
    log = open(home / "stderr.log", "wb")  # a pipe nobody reads would fill and block it
    proc = subprocess.Popen(args, cwd=home, env=_env(), stdout=subprocess.DEVNULL, stderr=log)
    samples: list[tuple[int, float, float]] = []
    peak = 0.0
    while proc.poll() is None:
        time.sleep(every)
        cpu, mb = _cpu(proc.pid), _peak_mb(proc.pid)
        if cpu is not None:
            samples.append((_ended(out), cpu, time.monotonic() - t0))
        peak = max(peak, mb or 0.0)
    wall = time.monotonic() - t0
    log.close()
    if proc.returncode not in (0, 1):
        err = (home / "stderr.log").read_text(errors="replace")
        raise SystemExit(f"plugdrop ablate exited {proc.returncode}: {err[-2000:]}")
    return {"samples": samples, "wall": wall, "peak_mb": peak, "out": str(out),
            "cpu": samples[-1][1] if samples else None}


def per_run(samples: list[tuple[int, float, float]], lo: float, hi: float, runs: int,
            least: float = 3.0) -> float | None:
    """Driver CPU seconds per run between the runs ``lo * runs`` and ``hi * runs`` ended (from
    the first run that ended at the earliest: the start-up, imports and checks, is no run's);
    ``None`` when that took less than ``least`` seconds (too short to measure against the
    samples' spacing)."""
    a = next((x for x in samples if x[0] >= max(1.0, lo * runs)), None)
    b = next((x for x in samples if x[0] >= hi * runs), None)
    if a is None or b is None or b[0] <= a[0] or b[2] - a[2] < least:
        return None
    return (b[1] - a[1]) / (b[0] - a[0])


def timed(args: list[str], cwd: Path) -> float:
    t0 = time.monotonic()
    done = subprocess.run(args, cwd=cwd, env=_env(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)  # read whole by run(): never blocks
    if done.returncode not in (0, 1):
        raise SystemExit(f"{args}: exited {done.returncode}: {done.stderr[-2000:]!r}")
    return time.monotonic() - t0


def measure(runs: int, launcher: str, root: Path) -> dict[str, object]:
    home = Path(tempfile.mkdtemp(prefix=f"scale-{runs}-{launcher}-", dir=root))
    got = ablate(home, runs, launcher)
    out = Path(str(got["out"]))
    samples: list[tuple[int, float, float]] = got.pop("samples")  # type: ignore[assignment]
    # a tenth of the runs at each end, the first run's start-up and the last one's final report
    # (no run's cost) left out
    first = per_run(samples, 0.01, 0.11, runs)
    last = per_run(samples, 0.89, 0.99, runs)
    resume = timed([sys.executable, "-m", "plugdrop", "ablate", str(home / "scale.yaml"),
                    "--out", str(out), "--resume"], home)
    report = timed([sys.executable, "-m", "plugdrop", "report", str(out)], home)
    html = (out / "report.html").stat().st_size
    return {"runs": runs, "launcher": launcher, "wall_s": got["wall"],
            "cpu_per_run_ms": 1e3 * float(got["cpu"] or 0) / runs,
            "first_tenth_ms": None if first is None else 1e3 * first,
            "last_tenth_ms": None if last is None else 1e3 * last,
            "last_over_first": None if not first or last is None else last / first,
            "peak_mb": got["peak_mb"], "resume_s": resume, "report_s": report,
            "report_html_mb": html / 2 ** 20, "samples": samples}


def markdown(rows: list[dict[str, object]]) -> str:
    def f(x: object, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    lines = ["| runs | launcher | driver CPU/run (ms) | first tenth (ms/run) | last tenth "
             "(ms/run) | last / first | peak RSS (MB) | wall (s) | --resume (s) | "
             "plugdrop report (s) | report.html (MB) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['runs']} | {r['launcher']} | {f(r['cpu_per_run_ms'], '.1f')} | "
                     f"{f(r['first_tenth_ms'], '.1f')} | {f(r['last_tenth_ms'], '.1f')} | "
                     f"{f(r['last_over_first'], '.2f')} | {f(r['peak_mb'], '.0f')} | "
                     f"{f(r['wall_s'], '.0f')} | {f(r['resume_s'], '.1f')} | "
                     f"{f(r['report_s'], '.1f')} | {f(r['report_html_mb'], '.2f')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default="100,1000,10000")
    p.add_argument("--launchers", default="local,processes")
    p.add_argument("--markdown", help="append the table to this file")
    p.add_argument("--json", help="write the rows as JSON to this file")
    p.add_argument("--root", help="where the ablations go (default: a temporary folder)")
    args = p.parse_args(argv)
    root = Path(args.root or tempfile.mkdtemp(prefix="plugdrop-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for runs in (int(x) for x in args.runs.split(",")):
        for launcher in args.launchers.split(","):
            row = measure(runs, launcher, root)
            print(json.dumps({k: v for k, v in row.items() if k != "samples"}), flush=True)
            rows.append(row)
    table = markdown(rows)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()

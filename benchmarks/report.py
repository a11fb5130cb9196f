"""Print the ratio table of pytest-benchmark JSON files and write benchmarks/RESULTS.md.

Usage: python benchmarks/report.py RUN.json [RUN2.json ...] [--write benchmarks/RESULTS.md]
       python benchmarks/report.py CUDA.json --cuda benchmarks/RESULTS-cuda.md
       python benchmarks/report.py --rows ROWS.jsonl --cuda benchmarks/RESULTS-cuda.md

``--cuda`` (``./dev bench-gpu``) rewrites only the section of the latest GPU run in that file
(between its two marker lines, added at the end the first time), keeping the earlier
sessions' notes. ``--rows`` reads the rows a run recorded one by one (``BENCH_ROWS``: what a
machine without pytest-benchmark, or a run cut short, leaves).

With several runs (``./dev bench`` with ``BENCH_RUNS=3``), each ratio shows every run's value
and the worst of them, so a target is checked against all runs, not the luckiest.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import torch


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (f"CPU: {cpu}, {os.cpu_count()} cores (torch threads: {torch.get_num_threads()}); "
            f"torch {torch.__version__}; GPU: {gpu}; Python {platform.python_version()}")


def _cases(data: dict) -> dict[str, dict]:
    return {b["extra_info"]["case"]: b["extra_info"] for b in data["benchmarks"]
            if "case" in b.get("extra_info", {})}


def _ratio_cells(runs: list) -> str:
    """One run: ``1.02x``; several: ``1.02x (1.00 / 1.02 / 0.98)``, the worst first."""
    values = [r for r in runs if r is not None]
    if len(values) == 1:
        return f"{values[0]:.2f}x"
    return f"{max(values):.2f}x ({' / '.join(f'{v:.2f}' for v in values)})"


def table(datas: list[dict]) -> str:
    speed, memory = [], []
    per_run = [_cases(d) for d in datas]
    for case, info in per_run[-1].items():
        runs = [r.get(case) for r in per_run]
        if "ratio" in info:
            meds = info["median_ms"]
            subject = info.get("subject", "plugdrop")
            ratios = ", ".join(
                f"{_ratio_cells([r['ratio'].get(k) if r else None for r in runs])} vs {k} "
                f"({meds[k]:.2f} ms)" for k in info["ratio"])
            extra = ""
            if "fwd+bwd ratio" in info:
                cells = _ratio_cells([r.get("fwd+bwd ratio") if r else None for r in runs])
                extra = f"; fwd+bwd {cells} vs x*mask fwd+bwd"
            if "note" in info:
                extra += f"; {info['note']}"
            speed.append(f"| {case} | {meds[subject]:.2f} | {ratios}{extra} |")
        elif "bytes_per_element" in info:
            cells = ", ".join(f"{k}: {v:.3f}" for k, v in info["bytes_per_element"].items())
            memory.append(f"| {case} | {cells} |")
    head = "median of interleaved rounds; ratio = plugdrop / baseline, lower is better"
    if len(datas) > 1:
        head += (f"; {len(datas)} runs: the worst ratio, then each run's; ms from the last "
                 f"run")
    out = [f"## Speed ({head})", "", "| case | plugdrop ms | ratios |", "| --- | --- | --- |",
           *speed]
    if memory:
        out += ["", "## Memory saved for the backward (bytes per activation element)", "",
                "| case | bytes/element |", "| --- | --- |", *memory]
    return "\n".join(out)


def _conditions(datas: list[dict]) -> str:
    lines = []
    for i, d in enumerate(datas, 1):
        load = d.get("load_average")
        when = d.get("datetime", "?")
        if load:
            lines.append(f"- run {i}: {when}; 1-minute load average {load['start']:.2f} at the "
                         f"start, at most {load['max']:.2f}, {load['end']:.2f} at the end")
        else:
            lines.append(f"- run {i}: {when}; load not recorded")
        if d.get("allocator"):
            lines[-1] += f"; {d['allocator']}"
    return "\n".join(lines)


_BEGIN = "<!-- ./dev bench-gpu: the latest run, rewritten by each run -->"
_END = "<!-- end of ./dev bench-gpu's run -->"


def versions() -> str:
    """The GPU and the versions that decide its kernels."""
    parts = [f"GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}",
             f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN "
             f"{torch.backends.cudnn.version()})"]
    for name in ("triton", "timm", "torchvision"):
        try:
            parts.append(f"{name} {__import__(name).__version__}")
        except Exception:
            parts.append(f"{name} missing")
    return "; ".join(parts) + f"; Python {platform.python_version()}"


def write_cuda_section(dest: Path, datas: list[dict], text: str) -> None:
    """Put the run's table into ``dest`` between the markers, the rest of it kept."""
    section = "\n".join([_BEGIN, "## The latest `./dev bench-gpu` run", "",
                         versions() + ".", "", _conditions(datas), "", text, _END])
    old = dest.read_text() if dest.exists() else "# CUDA benchmark results\n"
    if _BEGIN in old and _END in old:
        head, rest = old.split(_BEGIN, 1)
        new = head + section + rest.split(_END, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n" + section + "\n"
    dest.write_text(new)


def _option(argv: list[str], files: list[str], flag: str) -> Path | None:
    if flag not in argv:
        return None
    value = argv[argv.index(flag) + 1]
    files.remove(value)
    return Path(value)


def main(argv: list[str]) -> None:
    files = [a for a in argv if not a.startswith("--")]
    dest = _option(argv, files, "--write")
    cuda = _option(argv, files, "--cuda")
    rows = _option(argv, files, "--rows")
    datas = [json.loads(Path(f).read_text()) for f in files]
    if rows is not None:
        import datetime
        lines = [line for line in rows.read_text().splitlines() if line.strip()]
        datas.append({"datetime": datetime.datetime.now().isoformat(timespec="seconds"),
                      "benchmarks": [{"extra_info": json.loads(line)} for line in lines]})
    text = table(datas)
    print(text)
    if cuda is not None:
        write_cuda_section(cuda, datas, text)
        print(f"\nwritten to {cuda}")
    if dest is not None:
        dest.write_text("# Benchmark results\n\nMeasured by `./dev bench` on: " + machine()
                        + "\n\n" + _conditions(datas) + "\n\n" + text + "\n")
        print(f"\nwritten to {dest}")


if __name__ == "__main__":
    main(sys.argv[1:])

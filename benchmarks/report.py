"""Print the ratio table of a pytest-benchmark JSON file and write benchmarks/RESULTS.md.

Usage: python benchmarks/report.py RESULTS.json [--write benchmarks/RESULTS.md]
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


def table(data: dict) -> str:
    speed, memory = [], []
    for b in data["benchmarks"]:
        info = b.get("extra_info", {})
        if "ratio" in info:
            meds = info["median_ms"]
            subject = info.get("subject", "plugdrop")
            ratios = ", ".join(f"{r:.2f}x vs {k} ({meds[k]:.2f} ms)"
                               for k, r in info["ratio"].items())
            extra = ""
            if "fwd+bwd ratio" in info:
                extra = f"; fwd+bwd {info['fwd+bwd ratio']:.2f}x vs x*mask fwd+bwd"
            if "note" in info:
                extra += f"; {info['note']}"
            speed.append(f"| {info['case']} | {meds[subject]:.2f} | {ratios}{extra} |")
        elif "bytes_per_element" in info:
            cells = ", ".join(f"{k}: {v:.3f}" for k, v in info["bytes_per_element"].items())
            memory.append(f"| {info['case']} | {cells} |")
    out = ["## Speed (median of interleaved rounds; ratio = plugdrop / baseline, lower is "
           "better)", "", "| case | plugdrop ms | ratios |", "| --- | --- | --- |", *speed]
    if memory:
        out += ["", "## Memory saved for the backward (bytes per activation element)", "",
                "| case | bytes/element |", "| --- | --- |", *memory]
    return "\n".join(out)


def main(argv: list[str]) -> None:
    data = json.loads(Path(argv[0]).read_text())
    text = table(data)
    print(text)
    if "--write" in argv:
        dest = Path(argv[argv.index("--write") + 1])
        dest.write_text("# Benchmark results\n\nMeasured by `./dev bench` on: " + machine()
                        + f"  \nDate: {data.get('datetime', '?')}\n\n" + text + "\n")
        print(f"\nwritten to {dest}")


if __name__ == "__main__":
    main(sys.argv[1:])

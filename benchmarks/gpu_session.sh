#!/usr/bin/env bash
# What a session lent a GPU runs, in one call of the device tool (its machine: python3 with
# torch, timm, torchvision, pytest; no .venv, no network; about 15 minutes of device time in
# all, start-up included):
#   bash benchmarks/gpu_session.sh
# 1. the GPU tests of the kernels (at most 4 minutes), 2. ./dev bench-gpu (at most 6), each
# log and the rewritten benchmarks/RESULTS-cuda.md copied to $OUT (the tool brings it back).
set -u
cd "$(dirname "$0")/.."
out=${OUT:-.benchmarks/gpu-session}
mkdir -p "$out"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1
timeout 240 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_cuda.py \
  tests/transforms/test_triton.py tests/kernels/test_layouts.py -k "cuda or triton" \
  > "$out/tests.log" 2>&1
echo "tests: exit status $?" | tee -a "$out/tests.log"
timeout 360 ./dev bench-gpu > "$out/bench.log" 2>&1
echo "bench-gpu: exit status $?" | tee -a "$out/bench.log"
cp benchmarks/RESULTS-cuda.md .benchmarks/cuda-rows.jsonl "$out/" 2>/dev/null
timeout 120 python3 benchmarks/gpu_skip_syncs.py > "$out/skip-syncs.txt" 2>&1; tail -n 6 "$out/skip-syncs.txt"
tail -n 40 "$out/bench.log"
# 3. CUDA graphs and host time (at most 3.5 minutes): masks under torch.cuda.graph replays and
# torch.compile(mode="reduce-overhead"), their GPU tests, the profiler's host time per call
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_cuda.py \
  -k "graph or reduce_overhead" > "$out/graphs-tests.log" 2>&1
echo "graph tests: exit status $?" | tee -a "$out/graphs-tests.log"
timeout 120 python3 benchmarks/gpu_graphs.py > "$out/graphs.txt" 2> "$out/graphs.log"
echo "gpu_graphs.py: exit status $?" | tee -a "$out/graphs.txt"
cat "$out/graphs.txt"

#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 000c6c1, at the end:
# the GPU-marked tests (graph timer, graph-vs-kernel jobs on a real GPU, split-K race, ...).
set -u
R=$OUT/r
mkdir -p "$R"
bash benchmarks/runs/byte_compile_wheels.sh
timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider -rA tests > "$R/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; grep -E "^(PASSED|FAILED|ERROR|SKIPPED)" "$R/gpu_tests.txt"; tail -n 2 "$R/gpu_tests.txt"
tar czf "$OUT/results.tgz" -C "$R" .

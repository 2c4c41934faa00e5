#!/usr/bin/env bash
# Device call: probe.py (this folder), from the staged worktree (.dev/kernels), PYTHONPATH=/tmp/site:$PWD.
set -u
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
timeout 240 python3 benchmarks/results/matmul_sweep/2026-12-01-15272c0-h200-rate/probe.py $OUT/probe.json 2>&1 | tee $OUT/log.txt
cat $OUT/gpu.txt

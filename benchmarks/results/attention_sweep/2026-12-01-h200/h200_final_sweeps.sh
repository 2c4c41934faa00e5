#!/usr/bin/env bash
# One nvidia-h200 device call (run from the staged tree, PYTHONPATH set; needs no wheels), after
# h200_vendor_sweeps.sh:
#  1. benchmarks/moe_sweep.py again, its torch path without the host synchronization bincount
#     made, and the grouped GEMM alone as a second column;
#  2. benchmarks/attention_sweep.py on the issue's whole grid (192 problems, fp16 first, then bf16)
#     with the 6 "final" candidates, one round (cut at its time limit: rows are written as done).
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
timeout 90 python3 benchmarks/moe_sweep.py --out "$OUT/moe.json" --grid issue > "$OUT/moe.txt" 2>&1
echo "moe rc=$?"; tail -n 48 "$OUT/moe.txt" | cut -c1-200
timeout 235 python3 benchmarks/attention_sweep.py --out "$OUT/attention_issue.json" \
  --grid issue --candidates final --rounds 1 > "$OUT/attention_issue.txt" 2>&1
echo "attention rc=$?"; grep -v Warning "$OUT/attention_issue.txt" | grep -v scaled_dot | tail -n 30

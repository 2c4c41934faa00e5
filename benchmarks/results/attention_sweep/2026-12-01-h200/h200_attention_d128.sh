#!/usr/bin/env bash
# One nvidia-h200 device call (run from the staged tree, PYTHONPATH set; needs no wheels), after
# h200_final_sweeps.sh: benchmarks/attention_sweep.py on the fp16 d=128 half of the issue's grid
# (48 problems) with the "d128" candidates (the issue grid's two d=128 winners and 64x32 tiles),
# one round, against the three SDPA backends.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
timeout 150 python3 benchmarks/attention_sweep.py --out "$OUT/attention_d128.json" \
  --grid issue-fp16-d128 --candidates d128 --rounds 1 > "$OUT/attention_d128.txt" 2>&1
echo "attention rc=$?"; grep -v Warning "$OUT/attention_d128.txt" | grep -v scaled_dot | tail -n 22

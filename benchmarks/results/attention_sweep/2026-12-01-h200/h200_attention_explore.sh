#!/usr/bin/env bash
# One nvidia-h200 device call (run from the staged tree, PYTHONPATH set; needs no wheels):
# benchmarks/attention_sweep.py on the exploration grid (16 fp16 problems) with the exploration
# candidates (the spec default, pointer-load Hopper tiles, TMA, heavy-first, warp specialization)
# against the cuDNN, flash and efficient SDPA backends. Output under $OUT.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
PYTHONUNBUFFERED=1 timeout 420 python3 benchmarks/attention_sweep.py --out "$OUT/attention_explore.json" \
  --grid explore --candidates explore --rounds 2 2>&1 | tee "$OUT/attention_explore.txt"

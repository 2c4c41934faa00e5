#!/usr/bin/env bash
# One nvidia-h200 device call (run from the staged tree, PYTHONPATH set; needs no wheels):
#  1. the GPU-marked tests of flash_attention and fused_moe (TMA, warp specialization, wide key
#     blocks, the parallel MoE alignment);
#  2. benchmarks/attention_sweep.py, second exploration (24 problems, 17 candidates);
#  3. benchmarks/moe_sweep.py on the issue's MoE grid (both GEMMs) against torch._grouped_mm;
#  4. benchmarks/paged_sweep.py against the copy bandwidth and contiguous-KV SDPA.
# Everything lands in $OUT.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
TRITON_INTERPRET=0 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/search_spaces/test_flash_attention.py tests/search_spaces/test_fused_moe.py > "$OUT/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; tail -n 4 "$OUT/gpu_tests.txt"
timeout 150 python3 benchmarks/attention_sweep.py --out "$OUT/attention_explore2.json" \
  --grid explore2 --candidates explore2 --rounds 2 > "$OUT/attention_explore2.txt" 2>&1
echo "attention rc=$?"; grep -v Warning "$OUT/attention_explore2.txt" | grep -v scaled_dot | tail -n 40
timeout 150 python3 benchmarks/moe_sweep.py --out "$OUT/moe.json" --grid issue > "$OUT/moe.txt" 2>&1
echo "moe rc=$?"; tail -n 45 "$OUT/moe.txt"
timeout 100 python3 benchmarks/paged_sweep.py --out "$OUT/paged.json" --grid issue > "$OUT/paged.txt" 2>&1
echo "paged rc=$?"; grep -v Warning "$OUT/paged.txt" | grep -v scaled_dot | tail -n 25

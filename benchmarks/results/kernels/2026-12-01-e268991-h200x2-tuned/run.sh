#!/usr/bin/env bash
# One nvidia-h200-x2 device call (repo root, wheels installed, PYTHONPATH set), at commit e268991, after
# the matmul space gained FUSED_REDUCE (split-K summed in the same launch by the last program at
# each tile, or by a second kernel) and a persistent TMA kernel (5928 valid configs on H200):
#  1. the matmul GPU tests (fused split-K race check: 200 launches, the same bits every time);
#  2. issue 4 item 5: kernels.py, one `tunefleet tune` job over the 20 matmul shapes on both GPUs
#     (200 trials each), winners from this job only (no earlier database or landscape: their times
#     come from other runs and older kernels), then each against cuBLAS on GPU 0; if the tune job
#     runs out of time, the same measurement from its stored trials;
#  3. issue 4 item 6, search row with kept workers on GPU 0: tuning_time.py --search-only
#     --warm-workers (a second sample of kernels/2026-12-01-e268991-h200-first/run.sh's).
# Everything lands in $OUT/results.tgz (the device returns at most 8 files).
set -u
R=$OUT/r
mkdir -p "$R/kernels"
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/search_spaces/test_matmul.py \
  > "$R/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; tail -n 1 "$R/gpu_tests.txt"
timeout 330 python3 benchmarks/kernels.py --out-dir "$R/kernels" --kernels matmul --trials 200 \
  --in-flight 16 > "$R/kernels/log.txt" 2>&1
rc=$?; echo "kernels rc=$rc"
if [ $rc -ne 0 ]; then
  mkdir -p "$R/kernels_stored"
  timeout 90 python3 benchmarks/kernels.py --out-dir "$R/kernels_stored" --kernels matmul --no-tune \
    --best-db "$R/kernels/kernels.db" > "$R/kernels_stored/log.txt" 2>&1
  echo "kernels (stored trials) rc=$?"
fi
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 benchmarks/tuning_time.py --out-dir "$R/tt_warm" \
  --search-trials 100 --search-only benchmarks/results/tuning_time/2026-11-30-8e860a9-h200-full-888 --warm-workers \
  > "$R/tt_warm_log.txt" 2>&1
echo "search-only warm rc=$?"; tail -n 4 "$R/tt_warm_log.txt"
rm -rf "$R"/tt_warm/cache_*
tar czf "$OUT/results.tgz" -C "$R" .
grep -hE "^(matmul|measured)" "$R"/kernels*/log.txt
grep -hE "^  M=" "$R"/kernels*/log.txt | cut -c1-150

#!/usr/bin/env bash
# One nvidia-h200-x2 device call (repo root, wheels installed, PYTHONPATH set):
#  1. issue 4 item 7: benchmarks/scaling.py (steady-state and whole-job rates, 60 trials a study);
#  2. issue 4 item 2: the last two matmul landscapes, M=4096 x (28672, 4096) on GPU 0 and
#     (4096, 14336) on GPU 1, 10 timed reps per config;
#  3. issue 4 item 5: benchmarks/kernels.py on GPU 0, winners = the landscapes' optima.
# Everything lands in $OUT/results.tgz (the device returns at most 8 files).
set -u
R=$OUT/r
mkdir -p "$R/land" "$R/scaling" "$R/kernels"
timeout 230 python3 benchmarks/scaling.py --out-dir "$R/scaling" --trials 60 > "$R/scaling/log.txt" 2>&1
echo "scaling rc=$?"
rm -rf "$R/scaling/triton_cache"
CUDA_VISIBLE_DEVICES=0 timeout 130 python3 -m orchestrator record matmul --reps 10 \
  --compile-workers 14 -p M=4096,N=28672,K=4096,dtype=bfloat16 --out "$R/land" \
  > "$R/land/matmul_M4096_N28672_log.txt" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 130 python3 -m orchestrator record matmul --reps 10 \
  --compile-workers 14 -p M=4096,N=4096,K=14336,dtype=bfloat16 --out "$R/land" \
  > "$R/land/matmul_M4096_K14336_log.txt" 2>&1
echo "landscape rc=$?"
wait
CUDA_VISIBLE_DEVICES=0 timeout 70 python3 benchmarks/kernels.py --out-dir "$R/kernels" \
  --kernels matmul rmsnorm --no-tune --best-landscape benchmarks/landscapes/h200 "$R/land" \
  > "$R/kernels/log.txt" 2>&1
echo "kernels rc=$?"
tar czf "$OUT/results.tgz" -C "$R" .
cat "$R/scaling/log.txt" | grep -v WARN
grep -E "^(matmul|rmsnorm|measured)" "$R/kernels/log.txt"

#!/usr/bin/env bash
# One nvidia-h200-x2 device call (repo root, wheels installed, PYTHONPATH set), after the driver
# moved Optuna in memory:
#  1. issue 4 item 2: matmul landscapes for M=1024 (GPU 0) and M=4096 (GPU 1) x the Llama-3-8B
#     (N, K) (4096^3 was recorded earlier), 10 timed reps per config;
#  2. issue 4 item 7: benchmarks/scaling.py again (the same matmul job on 1 and 2 GPUs);
#  3. issue 4 item 5: benchmarks/kernels.py on GPU 0, winners = the landscapes' optima.
# Everything lands in $OUT/results.tgz (the device returns at most 8 files).
set -u
R=$OUT/r
mkdir -p "$R/land" "$R/scaling" "$R/kernels"
shapes() {
  for nk in "$@"; do printf -- "-p M=%s,N=%s,K=%s,dtype=bfloat16 " "$M" "${nk%,*}" "${nk#*,}"; done
}
CUDA_VISIBLE_DEVICES=0 timeout 190 python3 -m orchestrator record matmul \
  $(M=1024 shapes 6144,4096 4096,4096 28672,4096 4096,14336) --reps 10 --compile-workers 14 \
  --out "$R/land" > "$R/land/matmul_M1024_log.txt" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 190 python3 -m orchestrator record matmul \
  $(M=4096 shapes 6144,4096 28672,4096 4096,14336) --reps 10 --compile-workers 14 \
  --out "$R/land" > "$R/land/matmul_M4096_log.txt" 2>&1
echo "landscapes M=4096 rc=$?"
wait
echo "landscapes done"
timeout 160 python3 benchmarks/scaling.py --out-dir "$R/scaling" --trials 40 > "$R/scaling/log.txt" 2>&1
echo "scaling rc=$?"
rm -rf "$R/scaling/triton_cache"
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 benchmarks/kernels.py --out-dir "$R/kernels" \
  --kernels matmul rmsnorm --no-tune --best-landscape benchmarks/landscapes/h200 "$R/land" \
  > "$R/kernels/log.txt" 2>&1
echo "kernels rc=$?"
tar czf "$OUT/results.tgz" -C "$R" .
grep -h wrote "$R"/land/*log.txt | wc -l
tail -n 4 "$R/scaling/log.txt"
grep -E "^(matmul|rmsnorm|measured)" "$R/kernels/log.txt"

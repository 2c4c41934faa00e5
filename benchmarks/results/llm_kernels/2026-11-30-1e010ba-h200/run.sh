#!/usr/bin/env bash
# One nvidia-h200-x2 device call (repo root, wheels installed, PYTHONPATH set):
#  1. issue 4 item 7: benchmarks/scaling.py (the same matmul job on 1 and 2 GPUs);
#  2. issue 5: flash_attention vs SDPA from the stored winners, on GPU 0, then the three
#     rmsnorm M=4096 landscapes; beside it on GPU 1, issue 4 item 2: matmul landscapes for
#     M in {1, 16, 128} x the Llama-3-8B (N, K) (10 timed reps per config).
# Everything lands in $OUT/results.tgz (the device returns at most 8 files).
# (At commit 8d6378b gzipped the two stored databases it reads; --best-db takes .db.gz since then.)
set -u
R=$OUT/r
mkdir -p "$R/scaling" "$R/llm" "$R/land"
timeout 290 python3 benchmarks/scaling.py --out-dir "$R/scaling" --trials 30 > "$R/scaling/log.txt" 2>&1
echo "scaling rc=$?"
rm -rf "$R/scaling/triton_cache"
D=benchmarks/results/llm_kernels/2026-11-30-1e010ba-h200
(
  CUDA_VISIBLE_DEVICES=0 timeout 150 python3 benchmarks/llm_kernels.py --out-dir "$R/llm" \
    --kernels flash_attention --no-tune --best-db $D/llm_kernels.db.gz $D/flash_attention_largest2.db.gz \
    > "$R/llm/log.txt" 2>&1
  echo "flash rc=$?"
  CUDA_VISIBLE_DEVICES=0 timeout 60 python3 -m orchestrator record rmsnorm --compile-workers 8 \
    -p M=4096,N=2048,dtype=bfloat16 -p M=4096,N=4096,dtype=bfloat16 -p M=4096,N=8192,dtype=bfloat16 \
    --out "$R/land" > "$R/land/rmsnorm_log.txt" 2>&1
  echo "rmsnorm landscapes rc=$?"
) &
P=()
for m in 1 16 128; do
  for nk in 6144,4096 4096,4096 28672,4096 4096,14336; do
    P+=(-p "M=$m,N=${nk%,*},K=${nk#*,},dtype=bfloat16")
  done
done
CUDA_VISIBLE_DEVICES=1 timeout 265 python3 -m orchestrator record matmul "${P[@]}" --reps 10 \
  --compile-workers 20 --out "$R/land" > "$R/land/matmul_log.txt" 2>&1
echo "matmul landscapes rc=$?"
wait
tar czf "$OUT/results.tgz" -C "$R" .
tail -n 4 "$R/scaling/log.txt"
grep -E "^flash" "$R/llm/log.txt"
grep -c wrote "$R/land/matmul_log.txt"

#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 2d6a705, after the
# matmul space gained TMA loads and split-K for BLOCK_M up to 128 (3408 valid configs on H200)
# and tune's in_flight became one per compile process + 1:
#  1. issue 4 item 6, search row again: `tunefleet tune` (100 trials, product defaults) on 4096^3
#     bf16, against the pipeline/autotune run of h200_tuning_time_full.sh (its folder in the repo);
#  2. a TMA sanity check: one config with TMA off and on, 4096^3 bf16 (`tunefleet trial`);
#  3. issue 4 item 5: benchmarks/kernels.py: one `tunefleet tune` job per kernel over its suite
#     (100 trials per problem, in_flight 12), winners = the fastest of the job's and the
#     recorded landscapes' (older matmul space, exhaustive), then each winner against cuBLAS /
#     torch rms_norm / torch.compile / a same-size copy.
# Everything lands in $OUT/results.tgz (the device returns at most 8 files).
set -u
R=$OUT/r
mkdir -p "$R/kernels"
timeout 120 python3 benchmarks/tuning_time.py --out-dir "$R/tt_search" --search-trials 100 \
  --search-only benchmarks/results/tuning_time/2026-11-30-8e860a9-h200-full-888 > "$R/tt_search_log.txt" 2>&1
echo "search-only rc=$?"; tail -n 7 "$R/tt_search_log.txt"
rm -rf "$R"/tt_search/cache_*
P=M=4096,N=4096,K=4096,dtype=bfloat16
C=BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,GROUP_M=8,SPLIT_K=1,num_warps=8,num_stages=4
for tma in False True; do
  timeout 60 python3 -m orchestrator trial matmul -p $P -c "$C,TMA=$tma" > "$R/trial_tma_$tma.txt" 2>&1
  echo "trial TMA=$tma rc=$?"; grep -E "outcome|median" "$R/trial_tma_$tma.txt"
done
timeout 380 python3 benchmarks/kernels.py --out-dir "$R/kernels" --kernels matmul rmsnorm \
  --trials 100 --in-flight 12 --best-landscape benchmarks/landscapes/h200 \
  > "$R/kernels/log.txt" 2>&1
echo "kernels rc=$?"
tar czf "$OUT/results.tgz" -C "$R" .
grep -E "^(matmul|rmsnorm|measured)" "$R/kernels/log.txt"
grep -E "^  M=" "$R/kernels/log.txt" | cut -c1-160

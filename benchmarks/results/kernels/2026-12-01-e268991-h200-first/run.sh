#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit e268991, after
# split-K became one launch (the last program at a tile sums the slices) and the matmul space
# gained a persistent TMA kernel (4296 valid configs on H200):
#  1. the GPU-marked tests (split-K race check: 200 launches, same bits every time);
#  2. persistent on/off for one large config on 4096^3 and 4096x4096x14336 (`tunefleet trial`);
#  3. issue 4 item 6, search row with kept workers: tuning_time.py --search-only --warm-workers;
#  4. issue 4 item 5: kernels.py, one `tunefleet tune` job over the 20 matmul shapes (120 trials
#     each), winners = the fastest of it, commit 2d6a705's database and the landscapes, then against
#     cuBLAS; if the tune job runs out of time, the same measurement from its stored trials.
# Everything lands in $OUT/results.tgz (the device returns at most 8 files).
set -u
R=$OUT/r
mkdir -p "$R/kernels"
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests > "$R/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; tail -n 3 "$R/gpu_tests.txt"
for P in M=4096,N=4096,K=4096,dtype=bfloat16 M=4096,N=4096,K=14336,dtype=bfloat16; do
  C=BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,GROUP_M=8,SPLIT_K=1,num_warps=8,num_stages=3,TMA=True
  for pers in False True; do
    f="$R/trial_${P%%,dtype*}_persistent_$pers.txt"
    timeout 60 python3 -m orchestrator trial matmul -p $P -c "$C,PERSISTENT=$pers" > "$f" 2>&1
    echo "trial $P PERSISTENT=$pers rc=$?"; grep -E "outcome|median" "$f"
  done
done
timeout 150 python3 benchmarks/tuning_time.py --out-dir "$R/tt_warm" --search-trials 100 \
  --search-only benchmarks/results/tuning_time/2026-11-30-8e860a9-h200-full-888 --warm-workers > "$R/tt_warm_log.txt" 2>&1
echo "search-only warm rc=$?"; tail -n 8 "$R/tt_warm_log.txt"
rm -rf "$R"/tt_warm/cache_*
gunzip -c benchmarks/results/kernels/2026-11-30-2d6a705-h200/more_matmul/kernels.db.gz > "$R/prior.db"
BEST=(--best-db "$R/prior.db" --best-landscape benchmarks/landscapes/h200)
timeout 300 python3 benchmarks/kernels.py --out-dir "$R/kernels" --kernels matmul --trials 120 \
  --in-flight 16 "${BEST[@]}" > "$R/kernels/log.txt" 2>&1
rc=$?; echo "kernels rc=$rc"
if [ $rc -ne 0 ]; then
  mkdir -p "$R/kernels_stored"
  timeout 90 python3 benchmarks/kernels.py --out-dir "$R/kernels_stored" --kernels matmul --no-tune \
    --best-db "$R/prior.db" "$R/kernels/kernels.db" --best-landscape benchmarks/landscapes/h200 \
    > "$R/kernels_stored/log.txt" 2>&1
  echo "kernels (stored trials) rc=$?"
fi
rm -f "$R/prior.db"
tar czf "$OUT/results.tgz" -C "$R" .
grep -hE "^(matmul|measured)" "$R"/kernels*/log.txt
grep -hE "^  M=" "$R"/kernels*/log.txt | cut -c1-150

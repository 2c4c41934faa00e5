#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 2d6a705, after
# h200_kernels_tma_splitk.sh (whose rmsnorm measurement hit its time limit):
#  1. benchmarks/kernels.py for rmsnorm, winners = that run's tune job (its database, gzipped in
#     the repo)
#     or the recorded landscapes, against torch rms_norm / torch.compile / a same-size copy;
#  2. matmul: the six shapes furthest under cuBLAS tuned further (300 trials per problem; the job
#     reuses that run's 100 measured trials each and warm-starts from the other shapes' winners),
#     then all 20 shapes timed against cuBLAS again.
# Everything lands in $OUT/results.tgz (the device returns at most 8 files).
set -u
R=$OUT/r
S=benchmarks/results/kernels/2026-11-30-2d6a705-h200
mkdir -p "$R/rms" "$R/mm"
gunzip -c $S/kernels.db.gz > "$R/mm/kernels.db"
cp "$R/mm/kernels.db" "$R/rms/earlier.db"
timeout 150 python3 benchmarks/kernels.py --out-dir "$R/rms" --kernels rmsnorm --no-tune \
  --best-db "$R/rms/earlier.db" --best-landscape benchmarks/landscapes/h200 > "$R/rms/log.txt" 2>&1
echo "rmsnorm rc=$?"
timeout 330 python3 benchmarks/kernels.py --out-dir "$R/mm" --kernels matmul --trials 300 \
  --only 0 4 8 9 11 19 --best-landscape benchmarks/landscapes/h200 > "$R/mm/log.txt" 2>&1
echo "matmul rc=$?"
rm -f "$R/rms/earlier.db"
tar czf "$OUT/results.tgz" -C "$R" .
grep -E "^(matmul|rmsnorm|measured)" "$R"/rms/log.txt "$R"/mm/log.txt
grep -hE "^  M=" "$R"/rms/log.txt "$R"/mm/log.txt | cut -c1-200

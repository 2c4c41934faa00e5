#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 2d6a705, after
# h200_kernels_more.sh: no tuning, winners = the fastest ok trial or best config in that run's
# database (gzipped in the repo; it holds every trial of both session-3 kernel runs) or the
# recorded landscapes:
#  1. rmsnorm over its 12 problems (the 16384-token rows had no stored best config before:
#     their tune job was cut short after storing its trials), against torch rms_norm,
#     torch.compile and a same-size copy;
#  2. matmul over its 20 problems against cuBLAS again: a second measurement of the same winners.
# Everything lands in $OUT/results.tgz (the device returns at most 8 files).
set -u
R=$OUT/r
S=benchmarks/results/kernels/2026-11-30-2d6a705-h200/more_matmul
mkdir -p "$R/rms" "$R/mm"
gunzip -c $S/kernels.db.gz > "$R/earlier.db"
for k in rmsnorm matmul; do
  d=$R/rms; [ $k = matmul ] && d=$R/mm
  timeout 150 python3 benchmarks/kernels.py --out-dir "$d" --kernels $k --no-tune \
    --best-db "$R/earlier.db" --best-landscape benchmarks/landscapes/h200 > "$d/log.txt" 2>&1
  echo "$k rc=$?"
done
rm -f "$R/earlier.db"
tar czf "$OUT/results.tgz" -C "$R" .
grep -hE "^(matmul|rmsnorm|measured)" "$R"/rms/log.txt "$R"/mm/log.txt
grep -hE "^  M=" "$R"/rms/log.txt "$R"/mm/log.txt | cut -c1-200

#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit e268991, after
# kernels/2026-12-01-e268991-h200x2-tuned/run.sh: no tuning; the winners of that run's tune job (its database, gzipped
# in the repo) against cuBLAS again on another machine: a second measurement of the same configs.
# Everything lands in $OUT/results.tgz (the device returns at most 8 files).
set -u
R=$OUT/r
mkdir -p "$R/mm"
gunzip -c benchmarks/results/kernels/2026-12-01-e268991-h200x2-tuned/kernels.db.gz > "$R/tuned.db"
timeout 150 python3 benchmarks/kernels.py --out-dir "$R/mm" --kernels matmul --no-tune \
  --best-db "$R/tuned.db" > "$R/mm/log.txt" 2>&1
echo "matmul rc=$?"
rm -f "$R/tuned.db"
tar czf "$OUT/results.tgz" -C "$R" .
grep -hE "^(matmul|measured)" "$R/mm/log.txt"
grep -hE "^  M=" "$R/mm/log.txt" | cut -c1-150

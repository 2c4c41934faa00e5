#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit e268991: issue 4
# item 6, search row with kept workers (tuning_time.py --search-only --warm-workers), a fourth
# sample, after the space enumeration got faster and with the wheels byte-compiled first (they are
# installed --no-compile; how long a driver takes to import them is part of every job's start).
# Everything lands in $OUT/results.tgz (the device returns at most 8 files).
set -u
R=$OUT/r
mkdir -p "$R"
bash benchmarks/runs/byte_compile_wheels.sh
timeout 120 python3 benchmarks/tuning_time.py --out-dir "$R/tt_warm" --search-trials 100 \
  --search-only benchmarks/results/tuning_time/2026-11-30-8e860a9-h200-full-888 --warm-workers > "$R/tt_warm_log.txt" 2>&1
echo "search-only warm rc=$?"; tail -n 2 "$R/tt_warm_log.txt"
rm -rf "$R"/tt_warm/cache_*
tar czf "$OUT/results.tgz" -C "$R" .

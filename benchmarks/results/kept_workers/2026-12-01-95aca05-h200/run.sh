#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit e268991, when no
# two-GPU machine was lent for h200_x2_scaling_warm.sh:
#  1. benchmarks/kept_workers.py on the GPU (1024^3 bf16, 12-trial jobs): time to a job's first
#     trial on a kept worker, on a kept worker that had started but run no trial (the case of the
#     second GPU's actor in the scaling run, since its pool and trial process create their GPU
#     context at start), and on fresh workers;
#  2. issue 4 item 6: tuning_time.py --search-only --warm-workers, a second byte-compiled sample.
# Everything lands in $OUT/results.tgz (the device returns at most 8 files).
set -u
R=$OUT/r
mkdir -p "$R"
bash benchmarks/runs/byte_compile_wheels.sh
timeout 200 python3 benchmarks/kept_workers.py --problem M=1024,N=1024,K=1024,dtype=bfloat16 \
  --jobs 2 > "$R/kept_workers.txt" 2> "$R/kept_workers.err"
echo "kept_workers rc=$?"; grep -v WARN "$R/kept_workers.txt"
timeout 120 python3 benchmarks/tuning_time.py --out-dir "$R/tt_warm" --search-trials 100 \
  --search-only benchmarks/results/tuning_time/2026-11-30-8e860a9-h200-full-888 --warm-workers > "$R/tt_warm_log.txt" 2>&1
echo "search-only warm rc=$?"; tail -n 2 "$R/tt_warm_log.txt"
rm -rf "$R"/tt_warm/cache_*
tar czf "$OUT/results.tgz" -C "$R" .

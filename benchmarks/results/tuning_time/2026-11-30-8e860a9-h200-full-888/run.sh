#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 2d6a705:
# issue 4 item 6 over the whole SPLIT_K=1 matmul space (888 valid configs on the H200) of
# 4096^3 bf16: tunefleet's pipeline (`tunefleet record --configs`) against triton.autotune over
# the same list, each from an empty Triton cache, then a 48-trial `tunefleet tune` job and its
# time to a config within 2% of the pipeline's best. Everything lands in $OUT/results.tgz
# (the device returns at most 8 files).
set -u
R=$OUT/r
mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$R/gpu.txt" 2>&1
timeout 560 python3 benchmarks/tuning_time.py --out-dir "$R/tt" --search-trials 48 \
  > "$R/tt_log.txt" 2>&1
echo "tuning_time rc=$?"
rm -rf "$R"/tt/cache_*
tar czf "$OUT/results.tgz" -C "$R" .
cat "$R/tt_log.txt" | tail -n 14

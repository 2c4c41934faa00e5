#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 8d6378b: issue 4
# item 5 for matmul again on one H200, now that re-timing the top configs no longer runs one
# process per shape on the GPU at once: `python benchmarks/kernels.py --kernels matmul --trials
# 200 --in-flight 16` (kernel objective). Output in $OUT/results.tgz.
set -u
R=$OUT/r
mkdir -p "$R"
bash benchmarks/runs/byte_compile_wheels.sh
timeout 540 python3 benchmarks/kernels.py --out-dir "$R/k" --kernels matmul --trials 200 \
  --in-flight 16 > "$R/log.txt" 2> "$R/err.txt"
echo "kernels rc=$?"; grep -v WARN "$R/err.txt" | tail -n 3
gzip "$R/k/kernels.db"
grep -E "^(matmul|measured)|stored best" "$R/log.txt"
grep -E "^  M=" "$R/log.txt" | cut -c1-130
tar czf "$OUT/results.tgz" -C "$R" .

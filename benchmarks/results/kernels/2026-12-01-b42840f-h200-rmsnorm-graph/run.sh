#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 000c6c1: issue 4
# item 5 for rmsnorm by the graph objective: `python benchmarks/kernels.py --kernels rmsnorm
# --objective graph` (a graph-objective tune job over the suite, then tuned, default, torch
# rms_norm, torch.compile and a same-size copy all timed back to back, with the 4 GiB copy).
# Output in $OUT/results.tgz.
set -u
R=$OUT/r
mkdir -p "$R"
bash benchmarks/runs/byte_compile_wheels.sh
timeout 480 python3 benchmarks/kernels.py --out-dir "$R/k" --kernels rmsnorm --objective graph \
  --trials 40 --in-flight 16 > "$R/log.txt" 2> "$R/err.txt"
echo "kernels rc=$?"; grep -v WARN "$R/err.txt" | tail -n 3
gzip "$R/k/kernels.db"
tail -n 14 "$R/log.txt"
tar czf "$OUT/results.tgz" -C "$R" .

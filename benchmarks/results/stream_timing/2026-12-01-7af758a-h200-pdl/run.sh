#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, PYTHONPATH=$PWD), at commit 8d6378b: rmsnorm with the new PDL
# parameter (programmatic dependent launch): every config of 352, PDL off and on, timed alone and
# back to back (benchmarks/stream_timing.py). Needs only torch and triton. Output in
# $OUT/results.tgz.
set -u
R=$OUT/r
mkdir -p "$R"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$R/gpu.txt"
timeout 560 python3 benchmarks/stream_timing.py --json "$R/stream_timing.json" \
  --problems M=128,N=4096,dtype=bfloat16 M=4096,N=4096,dtype=bfloat16 \
  M=4096,N=8192,dtype=bfloat16 > "$R/log.txt" 2>&1
echo "stream_timing rc=$?"
tail -n 12 "$R/log.txt"
gzip "$R/stream_timing.json"
tar czf "$OUT/results.tgz" -C "$R" .

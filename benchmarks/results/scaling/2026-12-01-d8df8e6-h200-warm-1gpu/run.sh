#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 000c6c1, when no
# two-GPU machine was lent all session: the 1-GPU half of h200_x2_scaling_warm.sh
# (benchmarks/scaling.py --gpus 1 --warm-workers, 60 trials a study), to see the share of time
# outside the GPU process on one GPU now that in_flight is tune's own default (commit e268991 measured
# 10.5% with 12 in flight against 16 compile processes). No 2-GPU ratio comes from this run.
# Output in $OUT/results.tgz.
set -u
R=$OUT/r
mkdir -p "$R/scaling_1gpu"
bash benchmarks/runs/byte_compile_wheels.sh
timeout 420 python3 benchmarks/scaling.py --out-dir "$R/scaling_1gpu" --gpus 1 --trials 60 \
  --warm-workers > "$R/scaling_1gpu/log.txt" 2>&1
rc=$?; echo "scaling --gpus 1 --warm-workers rc=$rc"
if [ $rc -ne 0 ]; then
  for f in "$R"/scaling_1gpu/*.err; do echo "== $f"; grep -v WARN "$f" | tail -n 5; done
fi
rm -rf "$R/scaling_1gpu/triton_cache"
tar czf "$OUT/results.tgz" -C "$R" .
grep -v WARN "$R/scaling_1gpu/log.txt" | tail -n 12

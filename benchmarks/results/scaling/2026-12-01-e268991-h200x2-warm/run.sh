#!/usr/bin/env bash
# One nvidia-h200-x2 device call (repo root, wheels installed, PYTHONPATH set): issue 4 item 7 with
# kept workers: benchmarks/scaling.py --warm-workers (the job of h200_x2_scaling_final.sh, 60
# trials a study; `cold` fills the Triton cache as before, then for 1 and for 2 GPUs a Ray head on
# 127.0.0.1 that sees those GPUs, a --keep-workers warm-up job on float16, and the measured job with
# --keep-workers on the warm-up's worker actors, so worker start-up is out of it); then issue 4
# item 6, search row with kept workers on GPU 0 (tuning_time.py --search-only --warm-workers).
# At commit e268991 ran it twice: (1) one kept actor served both GPUs' plans (equal plans got one name:
# 2 GPUs measured 1.00x; without the tuning_time step); (2) after that fix, the second GPU's actor
# returned its first trial 5.2 s into the job (its warm-up ran 1 trial, on the other actor). Since
# then the pool processes and the trial process create their GPU context at start, and the
# warm-up runs one trial per GPU, and scaling.py leaves in_flight to tune's default (one per compile
# process + 1; runs 1 and 2 had 12); a third run was refused (no two-GPU machine lent) and is next.
# Everything lands in $OUT/results.tgz (the device returns at most 8 files).
set -u
R=$OUT/r
mkdir -p "$R/scaling_warm"
bash benchmarks/runs/byte_compile_wheels.sh
timeout 300 python3 benchmarks/scaling.py --out-dir "$R/scaling_warm" --trials 60 --warm-workers \
  > "$R/scaling_warm/log.txt" 2>&1
rc=$?; echo "scaling --warm-workers rc=$rc"
if [ $rc -ne 0 ]; then
  for f in "$R"/scaling_warm/*.err; do echo "== $f"; grep -v WARN "$f" | tail -n 5; done
fi
rm -rf "$R/scaling_warm/triton_cache"
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 benchmarks/tuning_time.py --out-dir "$R/tt_warm" \
  --search-trials 100 --search-only benchmarks/results/tuning_time/2026-11-30-8e860a9-h200-full-888 --warm-workers \
  > "$R/tt_warm_log.txt" 2>&1
echo "search-only warm rc=$?"; tail -n 2 "$R/tt_warm_log.txt"
rm -rf "$R"/tt_warm/cache_*
tar czf "$OUT/results.tgz" -C "$R" .
grep -v WARN "$R/scaling_warm/log.txt" | tail -n 20

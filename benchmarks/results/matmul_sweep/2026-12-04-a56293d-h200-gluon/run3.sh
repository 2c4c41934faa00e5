#!/usr/bin/env bash
# Device call (repo root): matmul_sweep.py's narrow grid (cuBLAS's tiles: 64 rows, no split-K,
# 8-13 stages; outside the space) beside the suite winners and GLUON's best, 3 rounds.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tcache
timeout 420 python3 benchmarks/matmul_sweep.py --out $OUT/narrow.json --grid narrow --rounds 3 --jobs 16 --outside-space > $OUT/narrow_log.txt 2>&1
echo "sweep rc=$?" | tee -a $OUT/narrow_log.txt
grep -E "^M=|compiled|failed" $OUT/narrow_log.txt | cut -c1-200

#!/usr/bin/env bash
# The winners of ../2026-12-04-6796161-h200-wide-200/ (its kernels.db.gz, no tuning) compared with
# cuBLAS again by kernels.py, twice in turn: with the timer's hold (every rep queued before the
# GPU runs the first; 9d71e2a) and without it (MAX_HOLD_S = 0: the timer of 6796161). Called by
# ../../matmul_sweep/2026-12-04-e09fec5-h200-wide-split/run.sh after its sweep.
set -u
export PYTHONPATH=/tmp/site:$PWD TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
W=benchmarks/results/kernels/2026-12-04-6796161-h200-wide-200/kernels.db.gz
for hold in held unheld; do
  mkdir -p /tmp/r/$hold
  timeout 150 python3 - "$hold" "$W" <<'PY' > /tmp/r/$hold/log.txt 2>&1
import runpy, sys
sys.path.insert(0, "benchmarks")
import workers.timing as timing
if sys.argv[1] == "unheld":
    timing.MAX_HOLD_S = 0.0
sys.argv = ["kernels.py", "--out-dir", f"/tmp/r/{sys.argv[1]}", "--kernels", "matmul", "--no-tune",
            "--best-db", sys.argv[2]]
runpy.run_path("benchmarks/kernels.py", run_name="__main__")
PY
  echo "$hold rc=$?"; cp /tmp/r/$hold/log.txt $OUT/recompare_log_$hold.txt; cp /tmp/r/$hold/kernels.json $OUT/recompare_$hold.json
  grep -E "geomean|M=16,N=4096,K=4096 |M=128,N=4096,K=4096 " /tmp/r/$hold/log.txt | cut -c1-110
done

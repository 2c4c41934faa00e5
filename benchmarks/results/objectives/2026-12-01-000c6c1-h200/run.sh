#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 000c6c1: step 3 of
# stream_timing/2026-12-01-000c6c1-h200-graph-timer/run.sh again, after the grid sampler's stop request was fixed (that call's
# two tune jobs failed with "Study.stop is supposed to be invoked inside an objective function").
# `tunefleet tune rmsnorm` over all 88 configs (grid) at 4096 tokens, objective graph, then objective
# kernel, into one database; `tunefleet best` for each objective. Output in $OUT/results.tgz.
set -u
R=$OUT/r
mkdir -p "$R"
bash benchmarks/runs/byte_compile_wheels.sh
TF=(python3 -c "from orchestrator.cli import main; main()")
DB=sqlite:///$R/objectives.db
for objective in graph kernel; do
  timeout 200 "${TF[@]}" tune rmsnorm -p M=4096,N=4096,dtype=bfloat16 -p M=4096,N=8192,dtype=bfloat16 \
    --sampler grid --trials 140 --objective $objective --db "$DB" --json > "$R/tune_$objective.json" \
    2> "$R/tune_$objective.err"
  echo "tune $objective rc=$?"
  "${TF[@]}" best rmsnorm --objective $objective --db "$DB" --json > "$R/best_$objective.json" 2>&1
done
gzip "$R/objectives.db"
python3 - "$R" <<'PY'
import json, sys
r = sys.argv[1]
for objective in ("graph", "kernel"):
    best = json.load(open(f"{r}/best_{objective}.json"))["best"]
    tune = json.load(open(f"{r}/tune_{objective}.json"))
    for b, st in zip(best, tune["studies"]):
        print(objective, b["problem"], b["config"], f"{b['time_ms'] * 1e3:.1f} us",
              st["trials"], f"{st.get('gbs', 0):.0f} GB/s")
PY
tar czf "$OUT/results.tgz" -C "$R" .

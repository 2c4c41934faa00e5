#!/usr/bin/env bash
# Not kept: keeping the graph objective's other input sets per problem made no measurable difference
# (benchmarks/results/h200/graph_sets/compare.txt), so workers/trial.py still builds them per trial.
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH=/tmp/site:$PWD), at commit 8d6378b:
# graph-objective trials keep their other input sets per problem (workers/trial.py) against the
# code before (/tmp/old: this tree with old_trial.py, the previous commit's workers/trial.py). The same grid job (rmsnorm, all
# 352 configs of three problems, graph objective) runs new (warm-up: compiles every config into
# the cache), old, new; compared: trial-phase wall time and the median run_s per problem. Then the
# GPU-marked tests on the new code.
set -u
R=$OUT/r
mkdir -p "$R"
bash benchmarks/runs/byte_compile_wheels.sh
mkdir -p /tmp/old && cp -r orchestrator workers search_spaces db pyproject.toml /tmp/old/ \
  && cp old_trial.py /tmp/old/workers/trial.py
P="-p M=1,N=4096,dtype=bfloat16 -p M=128,N=4096,dtype=bfloat16 -p M=4096,N=4096,dtype=bfloat16"
job() {  # $1: tree, $2: name
  (cd "$1" && PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m orchestrator tune rmsnorm $P \
    --objective graph --sampler grid --trials 352 --db "sqlite:///$R/$2.db" > "$R/$2.txt" 2>&1)
  echo "$2 rc=$?"
}
job . new_warmup; job /tmp/old old; job . new
python3 - "$R" <<'PY' | tee "$R/compare.txt"
import sqlite3, statistics, sys
from datetime import datetime
print("run | trials | trial-phase wall s | median run_s per problem (ms)")
for name in ("new_warmup", "old", "new"):
    con = sqlite3.connect(f"{sys.argv[1]}/{name}.db")
    rows = con.execute("select problem_key, run_s, created_at from tf_trials").fetchall()
    t = [datetime.fromisoformat(r[2]) for r in rows]
    per = {}
    for k, run_s, _ in rows:
        if run_s is not None:
            per.setdefault(k, []).append(run_s)
    med = "  ".join(f"{k}: {1e3 * statistics.median(v):.1f}" for k, v in sorted(per.items()))
    print(f"{name} | {len(rows)} | {(max(t) - min(t)).total_seconds():.1f} | {med}")
PY
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rA tests > "$R/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)" "$R/gpu_tests.txt"; tail -n 1 "$R/gpu_tests.txt"
tar czf "$OUT/results.tgz" -C "$R" .

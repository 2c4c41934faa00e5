#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 000c6c1, after
# rmsnorm's space gained PROGRAMS_PER_SM (a persistent grid whose programs load their next row
# block while normalizing the current one): `tunefleet tune rmsnorm --sampler grid` over the whole
# 704-config space, objective graph for three problems and objective kernel for one, then the best
# time per PROGRAMS_PER_SM value and per STREAMING value read from the trials. Output in
# $OUT/results.tgz.
set -u
R=$OUT/r
mkdir -p "$R"
bash benchmarks/runs/byte_compile_wheels.sh
TF=(python3 -c "from orchestrator.cli import main; main()")
DB=sqlite:///$R/persistent.db
timeout 330 "${TF[@]}" tune rmsnorm -p M=4096,N=4096,dtype=bfloat16 -p M=4096,N=8192,dtype=bfloat16 \
  -p M=128,N=4096,dtype=bfloat16 --sampler grid --trials 1200 --objective graph --db "$DB" --json \
  > "$R/tune_graph.json" 2> "$R/tune_graph.err"
echo "tune graph rc=$?"
timeout 150 "${TF[@]}" tune rmsnorm -p M=4096,N=4096,dtype=bfloat16 --sampler grid --trials 1200 \
  --db "$DB" --json > "$R/tune_kernel.json" 2> "$R/tune_kernel.err"
echo "tune kernel rc=$?"
python3 - "$R/persistent.db" <<'PY' | tee "$R/summary.txt"
import sys
from collections import defaultdict
import sqlalchemy as sa
from db import Database
from db.models import Trial
database = Database(f"sqlite:///{sys.argv[1]}")
best = defaultdict(lambda: float("inf"))
outcomes = defaultdict(int)
with database.session(readonly=True) as s:
    for t in s.scalars(sa.select(Trial)):
        outcomes[(t.objective.value, t.outcome.value)] += 1
        if t.median_ms is not None and t.outcome.value == "ok":
            for name in ("PROGRAMS_PER_SM", "STREAMING"):
                key = (t.objective.value, t.problem_key, name, t.config[name])
                best[key] = min(best[key], t.median_ms)
print("outcomes", dict(outcomes))
print("objective | problem | parameter = value | best trial (us)")
for (objective, problem, name, value), ms in sorted(best.items()):
    print(objective, problem, f"{name}={value}", f"{ms * 1e3:.2f}")
PY
gzip "$R/persistent.db"
tar czf "$OUT/results.tgz" -C "$R" .

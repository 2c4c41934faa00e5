#!/usr/bin/env bash
# Seed 002 on the H200: profile a Llama-3.2-1B-shaped decoder (decode batch 1-256, then prefill
# batch 1-64; seq 512, eager vs CUDA graph), tune the hottest emitted decode jobs briefly (in this
# process, no Ray: benchmarks/profile/tune_jobs.py), swap the tuned kernels in (--with-bundle), and
# time the deployment path's launch overhead.
# Run from the repository root with PYTHONPATH set. Results are written under $RES and packed into
# $OUT/results.tgz (no traces) and $OUT/traces.tgz after every stage, so a run cut short keeps them.
# Stages run in order of need (launch overhead, decode, tune, decode with the bundle, prefill,
# prefill with the bundle); each gets its own limit, cut to what is left of BUDGET_S seconds from the
# start (less 15 s to pack), and a stage with under 30 s left is skipped.
# CPU dry run (the interpreter; the GPU stages become --device cpu eager runs and
# launch_overhead.py --smoke):
#   OUT=/tmp/o MODEL=tiny SEQ=32 PREFILL_BATCHES=1,2 DECODE_BATCHES=1,2 TUNE_DEVICE=interpreter \
#   BUDGET_S=3000 bash benchmarks/profile/runs/h200.sh
# On the H200 (2026-12-01, commit 7eb3bc0) the whole script took 280 s at BUDGET_S=395 (decode 54 s,
# tune 92 s, prefill 46 s); give the device call timeout_s = BUDGET_S + 30.
set -u
OUT=${OUT:?set OUT to the results folder}
MODEL=${MODEL:-llama-3.2-1b}
SEQ=${SEQ:-512}
PREFILL_BATCHES=${PREFILL_BATCHES:-1,2,4,8,16,32,64}
DECODE_BATCHES=${DECODE_BATCHES:-1,2,4,8,16,32,64,128,256}
RUNS=${RUNS:-10}
TRIALS=${TRIALS:-20}
TUNE_MINUTES=${TUNE_MINUTES:-0.3}
TRACE_FORWARDS=${TRACE_FORWARDS:-2}
TUNE_DEVICE=${TUNE_DEVICE:-auto}
BUDGET_S=${BUDGET_S:-440}
RES=${RES:-/tmp/tunefleet-results}
P=$RES/profile
L=$RES/launch_overhead
mkdir -p "$P/jobs" "$P/bundle/graph" "$L"
DB="sqlite:///$P/tune.db"
END=$(( $(date +%s) + BUDGET_S - 15 ))
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  GPU=1; DEVICE_OPT=; MODES=both
else
  GPU=0; DEVICE_OPT="--device cpu"; MODES=eager
  export TRITON_INTERPRET=1  # --with-bundle's Triton kernels, on the interpreter
fi
export OUT MODEL SEQ RUNS TRIALS TUNE_MINUTES TUNE_DEVICE RES P L DB GPU DEVICE_OPT MODES
pack() {
  tar czf "$OUT/results.tgz" -C "$RES" --exclude=traces --exclude=tune.db . 2>/dev/null
  tar czf "$OUT/traces.tgz" -C "$RES" --exclude='*-tuned' profile/prefill/traces profile/decode/traces 2>/dev/null
}
# stage LIMIT NAME CMD...: run CMD under min(LIMIT, time left) seconds, log its time, pack after.
stage() {
  local limit=$1 name=$2 left; shift 2
  left=$(( END - $(date +%s) ))
  (( left < limit )) && limit=$left
  if (( limit < 30 )); then echo "== $(date +%T) $name skipped: ${left}s left"; return; fi
  local t0; t0=$(date +%s)
  echo "== $(date +%T) $name (limit ${limit}s)"
  timeout "$limit" bash -c '"$@"' "$name" "$@" || echo "   $name failed or cut (rc $?)"
  echo "   $name took $(( $(date +%s) - t0 ))s"
  pack
}
profile() {  # profile PHASE BATCHES OUTNAME [options...]
  local phase=$1 batches=$2 name=$3; shift 3
  python3 -m orchestrator profile "$MODEL" --phase "$phase" --batch "$batches" --seq "$SEQ" \
    --runs "$RUNS" --mode "$MODES" $DEVICE_OPT --out "$P/$name" "$@" > "$P/$name.txt" 2>&1
}
pull_all() {  # `tunefleet pull` of each kernel and objective, in one process
  python3 - "$P" "$DB" >> "$P/pull.txt" 2>&1 <<'PY'
import sys
from orchestrator.commands.cli import main
p, db = sys.argv[1:]
for kernel in ("matmul", "rmsnorm", "paged_attention", "flash_attention"):
    for out, objective in ((f"{p}/bundle", "kernel"), (f"{p}/bundle/graph", "graph")):
        try:
            main(["pull", kernel, "--out", out, "--db", db, "--objective", objective])
        except SystemExit:
            pass
PY
  cp -n "$P"/bundle/graph/*.json "$P/bundle/" 2>/dev/null  # kernel-objective bundles win
  ls "$P/bundle" >> "$P/pull.txt"
}
tune() {
  # The hottest emitted decode job of each kernel (report order).
  local jobs
  jobs=$(python3 - "$P/decode/report.json" <<'PY'
import json, sys, pathlib
f = pathlib.Path(sys.argv[1])
emitted = json.loads(f.read_text()).get("emitted_jobs", []) if f.exists() else []
for kernel in ("matmul", "paged_attention", "rmsnorm"):
    print(next((j for j in emitted if f".{kernel}." in j), ""))
PY
)
  echo "   jobs: $(echo $jobs)"
  [ -n "$(echo $jobs)" ] || return 1
  python3 benchmarks/profile/tune_jobs.py $(echo $jobs) --db "$DB" --minutes "$TUNE_MINUTES" \
    --device "$TUNE_DEVICE" --json > "$P/tune.json" 2> "$P/tune.log"
}
launch_overhead() {
  python3 benchmarks/launch_overhead.py --lookup-only > "$L/lookup_only.txt" 2> "$L/err.txt"
  if (( GPU )); then
    python3 benchmarks/launch_overhead.py --json > "$L/launch_overhead.json" 2>> "$L/err.txt" &&
      python3 benchmarks/launch_overhead.py --from "$L/launch_overhead.json" > "$L/table.txt"
  else
    python3 benchmarks/launch_overhead.py --smoke > "$L/table.txt" 2>> "$L/err.txt"
  fi
}
export -f pack profile pull_all tune launch_overhead

stage 60 "launch overhead" launch_overhead
stage 150 "profile decode" profile decode "$DECODE_BATCHES" decode --trace-forwards "$TRACE_FORWARDS" \
  --emit-job "$P/jobs/decode.yaml" --emit-problems 2 --emit-trials "$TRIALS"
stage 130 "tune" tune
stage 60 "pull" pull_all  # what the tune stored, even if it was cut
stage 110 "with-bundle decode" profile decode "$DECODE_BATCHES" decode-tuned --trace-forwards 0 \
  --with-bundle "$P/bundle"
stage 100 "profile prefill" profile prefill "$PREFILL_BATCHES" prefill --trace-forwards "$TRACE_FORWARDS" \
  --emit-job "$P/jobs/prefill.yaml" --emit-problems 2 --emit-trials "$TRIALS"
stage 100 "with-bundle prefill" profile prefill "$PREFILL_BATCHES" prefill-tuned --trace-forwards 0 \
  --with-bundle "$P/bundle"

python3 - "$P" > "$RES/summary.txt" <<'PY'
import json, sys, pathlib
p = pathlib.Path(sys.argv[1])
for name in ("decode", "prefill"):
    f = p / name / "report.json"
    if not f.exists():
        print(name, "no report"); continue
    r = json.loads(f.read_text())
    t = r["transitions"][name]
    print(f"{name}: transition batch {t['batch']} (idle launch {t['idle_launch_us']}), graph stops paying at {t['graph_stops_paying_batch']}")
    for row in r["rows"]:
        s = row["stats"] or {}
        print(f" b{row['batch']:>4} {row['mode']:<5} {row['latency_ms']:9.3f} ms g/e {row['graph_over_eager'] or 0:.2f} "
              f"k {s.get('kernels', 0):g}/{s.get('matched', 0):g} tklqt {row['tklqt_ms'] or 0:8.3f} ms "
              f"({(row['tklqt_ms'] or 0) / row['latency_ms']:.2f} of latency) idle {row['idle_share'] or 0:.2f}")
    tf = p / f"{name}-tuned" / "report.json"
    if tf.exists():
        wb = json.loads(tf.read_text()).get("with_bundle", {})
        print(f" lookups {wb.get('lookups')}")
        for row in wb.get("rows", []):
            print(f" tuned b{row['batch']:>4} {row['mode']:<5} {row['baseline_ms']:8.3f} -> {row['tuned_ms']:8.3f} ms ({row['change']:+.1%}) err {row['max_rel_error']:.2g}")
PY
pack
cat "$RES/summary.txt"
cat "$L/table.txt" "$L/lookup_only.txt" 2>/dev/null

#!/usr/bin/env bash
# Seed 002 on the H200: profile a Llama-3.2-1B-shaped decoder (prefill batch 1-64, decode batch
# 1-256, seq 512, eager vs CUDA graph), tune the hottest emitted jobs briefly, swap the tuned
# kernels in (--with-bundle), and time the deployment path's launch overhead.
# Run from the repository root with PYTHONPATH set. Results are written under $RES and packed into
# $OUT/results.tgz (no traces) and $OUT/traces.tgz after every stage, so a run cut short keeps them.
# CPU dry run: MODEL=tiny SEQ=32 PREFILL_BATCHES=1,2 DECODE_BATCHES=1,2 TUNE_DEVICE=interpreter
set -u
OUT=${OUT:?set OUT to the results folder}
MODEL=${MODEL:-llama-3.2-1b}
SEQ=${SEQ:-512}
PREFILL_BATCHES=${PREFILL_BATCHES:-1,2,4,8,16,32,64}
DECODE_BATCHES=${DECODE_BATCHES:-1,2,4,8,16,32,64,128,256}
RUNS=${RUNS:-10}
TRIALS=${TRIALS:-20}
TUNE_MINUTES=${TUNE_MINUTES:-0.35}
TUNE_DEVICE=${TUNE_DEVICE:-auto}
RES=${RES:-/tmp/tunefleet-results}
P=$RES/profile
L=$RES/launch_overhead
mkdir -p "$P/jobs" "$P/bundle/graph" "$L"
DB="sqlite:///$P/tune.db"
tf() { python3 -m orchestrator "$@"; }
pack() {
  tar czf "$OUT/results.tgz" -C "$RES" --exclude=traces . 2>/dev/null
  tar czf "$OUT/traces.tgz" -C "$RES" --exclude='*-tuned' profile/prefill/traces profile/decode/traces 2>/dev/null
}
stage() { pack; echo "== $(date +%T) $*"; }

stage profile prefill
timeout 110 python3 -m orchestrator profile "$MODEL" --phase prefill --batch "$PREFILL_BATCHES" --seq "$SEQ" \
  --runs "$RUNS" --out "$P/prefill" --emit-job "$P/jobs/prefill.yaml" --emit-problems 2 \
  --emit-trials "$TRIALS" > "$P/prefill.txt" 2>&1 || echo "profile prefill failed: see prefill.txt"
stage profile decode
timeout 110 python3 -m orchestrator profile "$MODEL" --phase decode --batch "$DECODE_BATCHES" --seq "$SEQ" \
  --runs "$RUNS" --out "$P/decode" --emit-job "$P/jobs/decode.yaml" --emit-problems 2 \
  --emit-trials "$TRIALS" > "$P/decode.txt" 2>&1 || echo "profile decode failed: see decode.txt"

# The hottest job file of each kernel (report order): GEMM, norm, flash attention from prefill,
# paged attention from decode.
jobs=$(python3 - "$P" <<'PY'
import json, sys, pathlib
p = pathlib.Path(sys.argv[1])
want = {"prefill": ("matmul", "rmsnorm", "flash_attention"), "decode": ("paged_attention",)}
for phase, kernels in want.items():
    f = p / phase / "report.json"
    emitted = json.loads(f.read_text()).get("emitted_jobs", []) if f.exists() else []
    for kernel in kernels:
        print(next((j for j in emitted if f".{kernel}." in j), ""))
PY
)
stage tune $jobs
timeout 170 python3 benchmarks/profile/tune_jobs.py $(echo $jobs) -- --db "$DB" --minutes "$TUNE_MINUTES" \
  --in-flight 16 --device "$TUNE_DEVICE" --json > "$P/tune.json" 2> "$P/tune.log" || echo "tune failed: see tune.log"
for k in matmul rmsnorm flash_attention paged_attention; do
  tf pull "$k" --out "$P/bundle" --db "$DB" >> "$P/pull.txt" 2>&1
  tf pull "$k" --out "$P/bundle/graph" --db "$DB" --objective graph >> "$P/pull.txt" 2>&1
done
cp -n "$P"/bundle/graph/*.json "$P/bundle/" 2>/dev/null  # kernel-objective bundles win

if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  stage with-bundle prefill
  timeout 100 python3 -m orchestrator profile "$MODEL" --phase prefill --batch "$PREFILL_BATCHES" --seq "$SEQ" \
    --runs "$RUNS" --trace-forwards 0 --out "$P/prefill-tuned" --with-bundle "$P/bundle" > "$P/prefill-tuned.txt" 2>&1 \
    || echo "with-bundle prefill failed: see prefill-tuned.txt"
  stage with-bundle decode
  timeout 100 python3 -m orchestrator profile "$MODEL" --phase decode --batch "$DECODE_BATCHES" --seq "$SEQ" \
    --runs "$RUNS" --trace-forwards 0 --out "$P/decode-tuned" --with-bundle "$P/bundle" > "$P/decode-tuned.txt" 2>&1 \
    || echo "with-bundle decode failed: see decode-tuned.txt"
  stage launch overhead
  timeout 60 python3 benchmarks/launch_overhead.py --json > "$L/launch_overhead.json" 2> "$L/err.txt"
  python3 benchmarks/launch_overhead.py --from "$L/launch_overhead.json" > "$L/table.txt"
fi
stage done
python3 - "$P" > "$RES/summary.txt" <<'PY'
import json, sys, pathlib
p = pathlib.Path(sys.argv[1])
for name in ("prefill", "decode"):
    f = p / name / "report.json"
    if not f.exists():
        print(name, "no report"); continue
    r = json.loads(f.read_text())
    t = r["transitions"][name]
    print(f"{name}: transition batch {t['batch']} (idle launch {t['idle_launch_us']}), graph stops paying at {t['graph_stops_paying_batch']}")
    for row in r["rows"]:
        s = row["stats"]
        print(f" b{row['batch']:>4} {row['mode']:<5} {row['latency_ms']:9.3f} ms g/e {row['graph_over_eager'] or 0:.2f} "
              f"k {s['kernels']:g}/{s['matched']:g} tklqt {row['tklqt_ms'] or 0:8.3f} ms idle {row['idle_share'] or 0:.2f}")
    tf = p / f"{name}-tuned" / "report.json"
    if tf.exists():
        for row in json.loads(tf.read_text()).get("with_bundle", {}).get("rows", []):
            print(f" tuned b{row['batch']:>4} {row['mode']:<5} {row['baseline_ms']:8.3f} -> {row['tuned_ms']:8.3f} ms ({row['change']:+.1%}) err {row['max_rel_error']:.2g}")
PY
cat "$RES/summary.txt"
cat "$L/table.txt" 2>/dev/null
pack

#!/bin/bash
# The H200 run of benchmarks/triton_autotune (tunefleet on PYTHONPATH):
# capture the app, tune the capture with --widen (short budget), pull bundles, compare.
set -eo pipefail
OUTDIR=${1:?output folder}
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
python3 -m orchestrator capture --out "$OUTDIR/capture" -- python3 app.py
T1=$(date +%s)
python3 -m orchestrator tune --from-capture "$OUTDIR/capture" --widen --trials 12 --minutes 0.5 \
  --db "sqlite:///$OUTDIR/tf.db" --json > "$OUTDIR/tune.json" 2> "$OUTDIR/tune.log" || { tail -30 "$OUTDIR/tune.log"; exit 1; }
T2=$(date +%s)
python3 - "$OUTDIR" <<'PY'
import subprocess, sys
from orchestrator.capture_jobs import capture_jobs
out = sys.argv[1]
for job in capture_jobs(f"{out}/capture", widen=True):
    subprocess.run([sys.executable, "-m", "orchestrator", "pull", job.ref, "--out", f"{out}/bundles",
                    "--db", f"sqlite:///{out}/tf.db"], check=True)
PY
T3=$(date +%s)
APP_BUNDLE="$OUTDIR/bundles" python3 compare.py "$OUTDIR/compare.json"
T4=$(date +%s)
echo "wall s: capture $((T1-T0)) tune $((T2-T1)) pull $((T3-T2)) compare $((T4-T3))"

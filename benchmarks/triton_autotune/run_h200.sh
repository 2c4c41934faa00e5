#!/bin/bash
# The H200 run of benchmarks/triton_autotune (tunefleet importable, no Ray needed):
#   1 capture the unmodified app, 2 tune the capture with --widen in this process (tune_local.py),
#   3 pull a bundle per kernel, 4 compare.py: served configs vs triton.autotune's pick and host
#   time per launch, in one process.
# Each stage packs its results into OUT as soon as it ends (a run cut short keeps the stages
# done): 1-capture.tgz, 2-tune.tgz, 3-bundles.tgz, compare.json/compare.txt, stages.txt.
#   bash run_h200.sh OUT [WORK]
# CPU dry run (interpreter, small shapes, times meaningless):
#   TRITON_INTERPRET=1 APP_DEVICE=cpu TUNE_ARGS="--trials 2 --minutes 0.5" bash run_h200.sh OUT
set -uo pipefail
OUT=$(mkdir -p "${1:?output folder}" && cd "$1" && pwd)
WORK=${2:-$(mktemp -d)}
mkdir -p "$WORK"
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:${PYTHONPATH:-}"
TUNE_ARGS=${TUNE_ARGS:---trials 10 --minutes 0.6 --compile-timeout 20}
DEVICE=auto
[ "${APP_DEVICE:-cuda}" = cpu ] && DEVICE=interpreter
START=$(date +%s)

stage() {  # name status: one line in stages.txt, seconds since the start
  echo "$1 rc=$2 at $(($(date +%s) - START)) s" | tee -a "$OUT/stages.txt"
}

python3 -m orchestrator capture --out "$WORK/capture" -- python3 app.py > "$WORK/capture.log" 2>&1
rc=$?
tar czf "$OUT/1-capture.tgz" -C "$WORK" capture capture.log
stage capture $rc
[ $rc = 0 ] || { tail -20 "$WORK/capture.log"; exit 1; }

# shellcheck disable=SC2086  # TUNE_ARGS is a list of options
python3 tune_local.py "$WORK/capture" "sqlite:///$WORK/tf.db" --widen $TUNE_ARGS --device $DEVICE \
  > "$WORK/tune.jsonl" 2> "$WORK/tune.log"
rc=$?
tar czf "$OUT/2-tune.tgz" -C "$WORK" tune.jsonl tune.log $(cd "$WORK" && ls tf.db*)
stage tune $rc
[ $rc = 0 ] || { tail -30 "$WORK/tune.log"; exit 1; }

python3 - "$WORK" > "$WORK/pull.log" 2>&1 <<'PY'
import subprocess, sys
from orchestrator.app.capture_jobs import capture_jobs
work = sys.argv[1]
for job in capture_jobs(f"{work}/capture", widen=True):
    subprocess.run([sys.executable, "-m", "orchestrator", "pull", job.ref, "--out",
                    f"{work}/bundles", "--db", f"sqlite:///{work}/tf.db"], check=True)
PY
rc=$?
tar czf "$OUT/3-bundles.tgz" -C "$WORK" bundles pull.log
stage pull $rc
[ $rc = 0 ] || { tail -20 "$WORK/pull.log"; exit 1; }

APP_BUNDLE="$WORK/bundles" python3 compare.py "$OUT/compare.json" 2>&1 | tee "$OUT/compare.txt"
rc=$?
stage compare $rc
exit $rc

#!/usr/bin/env bash
# The deployment benchmark (issue 48, item 7): per model, profile -> emitted jobs -> tune -> pull ->
# profile --with-bundle, prefill and decode (and prefill batch 1 at each LONG_SEQ), eager and graph,
# and one table per model (baseline ms, swapped ms, change, Amdahl bound, what was swapped: Triton
# vs kept vendor per kernel, error of baseline and swapped against the float32 twin; under it, per
# phase, the kernels whose problems were decided by a nearest bundle entry, which the bound counts
# as unmeasured). Run from the repository root with PYTHONPATH set.
#
# Each model runs all its stages before the next model starts; every stage is limited to its own
# time, cut to what is left of BUDGET_S from the start (less 20 s to pack; a stage with under 30 s
# left is skipped), and $OUT/results.tgz (reports, tables, logs; no traces) is rewritten after each
# stage, so a run cut short keeps what it finished. Tuning runs in this process without Ray
# (benchmarks/profile/tune_jobs.py): per phase (prefill, decode, each long seq) the hottest emitted
# job of each kernel, at most TUNE_JOBS, the phases' hottest first; TRIALS trials, TUNE_MINUTES
# minutes per job, cut so that all jobs fit in 85% of the tune stage's limit (the rest is for the
# last job's re-timing), each job's part of that time by its share of its phase's profiled time
# (table.py --weights: the hotter job, the more trials). The pull stage combines each kernel's kernel- and graph-objective bundles
# into one (benchmarks/deployment/pull.py): the profile reads one bundle per kernel.
#
# Environment (defaults for a GPU; the CPU dry run changes them, see below):
#   OUT          results folder (required)            BUDGET_S    seconds for the whole run (480)
#   MODELS       "NAME:LAYERS ..." (LAYERS empty: all) ("llama-3.2-1b:16 qwen3-30b-a3b:4");
#                also llama-3-8b:8, mixtral-8x7b:2
#   SEQ          prompt / cached tokens (512)          RUNS        timed forwards per point (10)
#   LONG_SEQ     comma-separated seqs, each also profiled as prefill batch 1 (off; e.g. 8192,16384)
#   PREFILL_BATCHES (1,16)   DECODE_BATCHES (1,64)
#   TRIALS (12)  TUNE_MINUTES (0.25)  EMIT_PROBLEMS (2)  TUNE_JOBS per phase (4)  DTYPE (bfloat16)
#   STAGE_S      limit of one profile stage (90)       TUNE_S      limit of one tune stage (120)
# CPU dry run (tiny models on the interpreter, eager only; minutes on 2 cores):
#   OUT=/tmp/o DRY=1 BUDGET_S=3000 LONG_SEQ=32,48 bash benchmarks/deployment/run.sh
# On a GPU give the device call timeout_s = BUDGET_S + 30.
set -u
OUT=${OUT:?set OUT to the results folder}
DRY=${DRY:-0}
if (( DRY )) || ! python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  DRY=1; DEVICE_OPT="--device cpu"; MODES=eager; TUNE_DEVICE=interpreter
  export TRITON_INTERPRET=1
  # float16: the interpreter rounds float32 to bfloat16 by truncation (GPUs round to nearest).
  MODELS=${MODELS:-"tiny:1 tiny-moe:1"}; SEQ=${SEQ:-16}; DTYPE=${DTYPE:-float16}
  PREFILL_BATCHES=${PREFILL_BATCHES:-1}; DECODE_BATCHES=${DECODE_BATCHES:-2}
  TRIALS=${TRIALS:-2}; TUNE_JOBS=${TUNE_JOBS:-2}; EMIT_PROBLEMS=${EMIT_PROBLEMS:-1}
  STAGE_S=${STAGE_S:-400}; TUNE_S=${TUNE_S:-400}
else
  DEVICE_OPT=; MODES=both; TUNE_DEVICE=auto
fi
MODELS=${MODELS:-"llama-3.2-1b:16 qwen3-30b-a3b:4"}
SEQ=${SEQ:-512}
LONG_SEQ=${LONG_SEQ:-}
PREFILL_BATCHES=${PREFILL_BATCHES:-1,16}
DECODE_BATCHES=${DECODE_BATCHES:-1,64}
RUNS=${RUNS:-10}
TRIALS=${TRIALS:-12}
TUNE_MINUTES=${TUNE_MINUTES:-0.25}
EMIT_PROBLEMS=${EMIT_PROBLEMS:-2}
TUNE_JOBS=${TUNE_JOBS:-4}
DTYPE=${DTYPE:-bfloat16}
STAGE_S=${STAGE_S:-90}
TUNE_S=${TUNE_S:-120}
BUDGET_S=${BUDGET_S:-480}
RES=${RES:-/tmp/tunefleet-deployment}
if [ -n "$LONG_SEQ" ] && ! [[ $LONG_SEQ =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]]; then
  echo "error: LONG_SEQ must be comma-separated positive integers, got '$LONG_SEQ'" >&2
  exit 2
fi
mkdir -p "$RES" "$OUT"
DB="sqlite:///$RES/tune.db"
END=$(( $(date +%s) + BUDGET_S - 20 ))
export OUT RES DB DEVICE_OPT MODES TUNE_DEVICE SEQ LONG_SEQ PREFILL_BATCHES DECODE_BATCHES RUNS TRIALS \
  TUNE_MINUTES EMIT_PROBLEMS TUNE_JOBS DTYPE

pack() {
  python3 benchmarks/deployment/table.py "$RES" > "$RES/tables.md" 2> "$RES/table.err"
  tar czf "$OUT/results.tgz" -C "$RES" --exclude=traces --exclude=tune.db . 2>/dev/null
}
stage() {  # stage LIMIT NAME CMD...: run CMD under min(LIMIT, time left) seconds, pack after.
  local limit=$1 name=$2 left t0; shift 2
  left=$(( END - $(date +%s) ))
  (( left < limit )) && limit=$left
  if (( limit < 30 )); then echo "== $(date +%T) $name skipped: ${left}s left"; return; fi
  t0=$(date +%s)
  echo "== $(date +%T) $name (limit ${limit}s)"
  LIMIT=$limit timeout "$limit" bash -c '"$@"' "$name" "$@" || echo "   $name failed or cut (rc $?)"
  echo "   $name took $(( $(date +%s) - t0 ))s"
  pack
}
profile() {  # profile DIR NAME LAYERS PHASE BATCHES SEQ [options...]
  local dir=$1 name=$2 layers=$3 phase=$4 batches=$5 seq=$6; shift 6
  python3 -m orchestrator profile "$name" ${layers:+--layers "$layers"} --phase "$phase" \
    --batch "$batches" --seq "$seq" --runs "$RUNS" --mode "$MODES" --dtype "$DTYPE" \
    --trace-forwards 1 $DEVICE_OPT --out "$dir" "$@" > "$dir.txt" 2>&1
}
baseline() {  # baseline DIR NAME LAYERS: each point profiled, its hot shapes emitted as jobs
  local dir=$1 name=$2 layers=$3
  mkdir -p "$dir/jobs"
  profile "$dir/prefill" "$name" "$layers" prefill "$PREFILL_BATCHES" "$SEQ" \
    --emit-job "$dir/jobs/prefill.yaml" --emit-problems "$EMIT_PROBLEMS" --emit-trials "$TRIALS"
  profile "$dir/decode" "$name" "$layers" decode "$DECODE_BATCHES" "$SEQ" \
    --emit-job "$dir/jobs/decode.yaml" --emit-problems "$EMIT_PROBLEMS" --emit-trials "$TRIALS"
  local seq
  for seq in ${LONG_SEQ//,/ }; do
    profile "$dir/prefill-long-$seq" "$name" "$layers" prefill 1 "$seq" \
      --emit-job "$dir/jobs/long-$seq.yaml" --emit-problems "$EMIT_PROBLEMS" --emit-trials "$TRIALS"
  done
}
tune() {  # tune DIR: per phase the hottest emitted job of each kernel, at most TUNE_JOBS
  local dir=$1 jobs weights
  jobs=$(python3 benchmarks/deployment/table.py --jobs "$dir" "$TUNE_JOBS")
  weights=$(python3 benchmarks/deployment/table.py --weights "$dir" "$TUNE_JOBS")
  echo "   jobs: $(echo $jobs) (weights $weights)"
  [ -n "$(echo $jobs)" ] || return 1
  python3 benchmarks/profile/tune_jobs.py $jobs --weights "$weights" --db "$DB" \
    --minutes "$TUNE_MINUTES" --budget-s $(( LIMIT * 85 / 100 )) --device "$TUNE_DEVICE" --json \
    > "$dir/tune.json" 2> "$dir/tune.log"
}
pull_all() {  # every kernel's bundles, both objectives, combined into one per kernel
  python3 benchmarks/deployment/pull.py "$RES/bundle" "$DB" >> "$RES/pull.txt" 2>&1
}
swapped() {  # swapped DIR NAME LAYERS: the same points with the bundle swapped in
  local dir=$1 name=$2 layers=$3
  profile "$dir/prefill-tuned" "$name" "$layers" prefill "$PREFILL_BATCHES" "$SEQ" \
    --with-bundle "$RES/bundle"
  profile "$dir/decode-tuned" "$name" "$layers" decode "$DECODE_BATCHES" "$SEQ" \
    --with-bundle "$RES/bundle"
  local seq
  for seq in ${LONG_SEQ//,/ }; do
    profile "$dir/prefill-long-$seq-tuned" "$name" "$layers" prefill 1 "$seq" \
      --with-bundle "$RES/bundle"
  done
}
export -f pack profile baseline tune pull_all swapped
mkdir -p "$RES/bundle"

for spec in $MODELS; do
  name=${spec%%:*}; layers=${spec#*:}; [ "$layers" = "$spec" ] && layers=
  dir="$RES/$name"
  mkdir -p "$dir"
  stage "$STAGE_S" "$name baseline" baseline "$dir" "$name" "$layers"
  stage "$TUNE_S" "$name tune" tune "$dir"
  stage 40 "$name pull" pull_all
  stage "$STAGE_S" "$name with bundle" swapped "$dir" "$name" "$layers"
done
pack
cat "$RES/tables.md"

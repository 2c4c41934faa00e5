#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 000c6c1, after the
# graph objective became "launches back to back in a CUDA graph over rotating inputs" and times
# were keyed by objective:
#  1. the GPU-marked tests;
#  2. benchmarks/stream_timing.py again, now through workers.timing.time_graph;
#  3. `tunefleet tune rmsnorm` over all 88 configs (grid) at 4096 tokens, objective graph, then
#     objective kernel, into one database; `tunefleet best` for each objective.
# Everything lands in $OUT/results.tgz.
set -u
R=$OUT/r
mkdir -p "$R"
bash benchmarks/runs/byte_compile_wheels.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$R/gpu.txt"
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests > "$R/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; tail -n 3 "$R/gpu_tests.txt"
timeout 200 python3 benchmarks/stream_timing.py --json "$R/stream_timing.json" > "$R/stream_timing.txt" 2>&1
echo "stream_timing rc=$?"
gzip "$R/stream_timing.json"
TF=(python3 -c "from orchestrator.cli import main; main()")
DB=sqlite:///$R/objectives.db
for objective in graph kernel; do
  timeout 150 "${TF[@]}" tune rmsnorm -p M=4096,N=4096,dtype=bfloat16 -p M=4096,N=8192,dtype=bfloat16 \
    --sampler grid --trials 88 --objective $objective --db "$DB" --json > "$R/tune_$objective.json" \
    2> "$R/tune_$objective.err"
  echo "tune $objective rc=$?"
  "${TF[@]}" best rmsnorm --objective $objective --db "$DB" > "$R/best_$objective.txt" 2>&1
  cat "$R/best_$objective.txt"
done
gzip "$R/objectives.db"
tail -n 9 "$R/stream_timing.txt"
tar czf "$OUT/results.tgz" -C "$R" .

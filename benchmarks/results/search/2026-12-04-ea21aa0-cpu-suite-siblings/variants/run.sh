#!/usr/bin/env bash
# Each variant: 8 seeds over the 19 recorded H200 matmul landscapes, as one job each (repo root).
set -eu
V=benchmarks/results/search/2026-12-04-ea21aa0-cpu-suite-siblings/variants
export PYTHONPATH=$PWD OPENBLAS_NUM_THREADS=1
run() { name=$1; shift; env "$@" python $V/variants.py --landscape benchmarks/landscapes/h200/matmul_*.json.gz --seeds 8 --jobs 2 --json 2>/dev/null > $V/$name.json; }
run shipped
run probes2 SP=2
run probes3 SP=3
run probes1-from4 SF=4
run probes1-from16 SF=16
run siblings-fastest-only SKIPBEST=1
run model-only MODE=model SP=0
run model-and-probes2 MODE=full SP=2
python $V/summary.py $V/*.json > $V/summary.txt

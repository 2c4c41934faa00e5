#!/bin/sh
# Re-runs the recorded sampler table (benchmarks/results/search/*.cmd.txt) with the Study loop.
# From the repo root: sh benchmarks/results/search/search-2026-12-01/run.sh
set -e
OUT=benchmarks/results/search/search-2026-12-01
python benchmarks/search.py --landscape benchmarks/landscapes/h200/matmul_M4096_N4096_K4096_bfloat16.json.gz --sampler random local cmaes cmaes+novel tpe --seeds 20 --batch 4 --jobs 1 --json > $OUT/search_h200_matmul_4096.json
python benchmarks/search.py --landscape benchmarks/landscapes/h200/matmul_*.json.gz --sampler local --seeds 20 --batch 4 --warm-from benchmarks/landscapes/h200/matmul_*.json.gz --jobs 1 --json > $OUT/search_h200_matmul_suite.json
python benchmarks/search.py --landscape benchmarks/landscapes/h200/rmsnorm_*.json.gz --sampler local random --seeds 20 --batch 4 --warm-from benchmarks/landscapes/h200/rmsnorm_*.json.gz --jobs 1 --json > $OUT/search_h200_rmsnorm_suite.json
for f in search_h200_matmul_4096 search_h200_matmul_suite search_h200_rmsnorm_suite; do
  echo "#### $f"; python benchmarks/search.py --table $OUT/$f.json; echo
done > $OUT/TABLE.md

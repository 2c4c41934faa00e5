#!/bin/sh
# The sampler table of benchmarks/results/search/2026-11-30-d99701c-cpu/ re-run with the product's
# Study loop (same landscapes, samplers, seeds, batch). From the repo root:
#   sh benchmarks/results/search/2026-12-01-cpu-study-loop/run.sh
# Here the 4096^3 run was split in two processes (tpe apart, --jobs 2), run in the background under
# nice beside the two suites; seeds are independent tasks, so a split gives the same rows.
set -e
OUT=benchmarks/results/search/2026-12-01-cpu-study-loop
L=benchmarks/landscapes/h200/matmul_M4096_N4096_K4096_bfloat16.json.gz
python benchmarks/search.py --landscape $L --sampler random local cmaes cmaes+novel --seeds 20 --batch 4 --jobs 1 --json > $OUT/part_4096_others.json
python benchmarks/search.py --landscape $L --sampler tpe --seeds 20 --batch 4 --jobs 2 --json > $OUT/part_4096_tpe.json
python -c "import json,sys; rows=[r for p in sys.argv[1:] for r in json.load(open(p))['results']]; print(json.dumps({'results': rows}, indent=1))" $OUT/part_4096_others.json $OUT/part_4096_tpe.json > $OUT/search_h200_matmul_4096.json
python benchmarks/search.py --landscape benchmarks/landscapes/h200/matmul_*.json.gz --sampler local --seeds 20 --batch 4 --warm-from benchmarks/landscapes/h200/matmul_*.json.gz --jobs 1 --json > $OUT/search_h200_matmul_suite.json
python benchmarks/search.py --landscape benchmarks/landscapes/h200/rmsnorm_*.json.gz --sampler local random --seeds 20 --batch 4 --warm-from benchmarks/landscapes/h200/rmsnorm_*.json.gz --jobs 1 --json > $OUT/search_h200_rmsnorm_suite.json
for f in search_h200_matmul_4096 search_h200_matmul_suite search_h200_rmsnorm_suite; do
  echo "#### $f"; echo; python benchmarks/search.py --table $OUT/$f.json; echo
done > $OUT/TABLE.md
python $OUT/compare.py benchmarks/results/search/2026-11-30-d99701c-cpu $OUT > $OUT/compare.txt

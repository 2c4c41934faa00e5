#!/usr/bin/env bash
# One device call (repo root, commit e09fec5): the matmul and workers GPU tests compiled, the
# wide-split sweep (outside the space too: 160 accumulators per thread), then kernels.py's
# comparison of the wide run's winners with the timer's hold and without
# (../../kernels/2026-12-04-9d71e2a-h200-wide-recompare/run.sh).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu tests/search_spaces/test_matmul.py tests/workers/test_runner.py > $OUT/gpu_tests.txt 2>&1
tail -1 $OUT/gpu_tests.txt
timeout 240 python3 benchmarks/matmul_sweep.py --out $OUT/wide_split.json --grid wide-split --rounds 3 --jobs 16 --outside-space > $OUT/wide_split_log.txt 2>&1
echo "sweep rc=$?"; grep -E "^M=|compiled|failed" $OUT/wide_split_log.txt | cut -c1-150
bash benchmarks/results/kernels/2026-12-04-9d71e2a-h200-wide-recompare/run.sh

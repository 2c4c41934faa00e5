#!/usr/bin/env bash
# Device call 1: stream-K race test, matmul_sweep (issue grid), kernels.py matmul (tune without Ray -> pull -> bundle).
set -u
R=/tmp/res; mkdir -p $R/ms $R/k
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> $R/gpu.txt
TRITON_INTERPRET=0 timeout 90 python3 -m pytest -x -q -p no:cacheprovider tests/search_spaces/test_matmul.py -k race_free > $R/gpu_tests.txt 2>&1
timeout 150 python3 benchmarks/matmul_sweep.py --out $R/ms/matmul_sweep.json --rounds 2 > $R/ms/matmul_sweep.txt 2>&1
timeout 240 python3 benchmarks/kernels.py --out-dir $R/k --kernels matmul --no-ray --trials 40 --minutes 2 > $R/k/log.txt 2>&1
gzip -k $R/k/kernels.db 2>/dev/null; rm -f $R/k/kernels.db
tar czf $OUT/results.tgz -C $R .
cat $R/gpu.txt; tail -2 $R/gpu_tests.txt; grep -v "^  c\|^ \"\|^{\|^}" $R/ms/matmul_sweep.txt | tail -30; grep geomean $R/ms/matmul_sweep.txt
grep -v "^  M=" $R/k/log.txt | tail -12

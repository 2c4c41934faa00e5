#!/usr/bin/env bash
# Device call: the GPU race test of split-K (counts 2, 3, 8 and stream-K), then kernels.py matmul
# over the whole suite tuned without Ray (tune -> pull -> bundle), tuned vs cuBLAS interleaved.
# Run from the staged worktree (.dev/kernels) with PYTHONPATH=/tmp/site:$PWD.
set -u
R=/tmp/res; mkdir -p $R/k
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> $R/gpu.txt
nproc >> $R/gpu.txt
pack() { tar czf $OUT/results.tgz -C $R --exclude='*.db' --exclude='*.db-*' . ; }
timeout 50 python3 -m pytest -q -p no:cacheprovider tests/search_spaces/test_matmul.py -k race_free > $R/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" | tee -a $R/gpu_tests.txt; tail -3 $R/gpu_tests.txt
timeout 510 python3 benchmarks/kernels.py --out-dir $R/k --kernels matmul --no-ray --trials 200 \
  --in-flight 16 --minutes 6.25 > $R/k/log.txt 2>&1
echo "kernels rc=$?" | tee -a $R/k/log.txt
gzip -kf $R/k/kernels.db 2>/dev/null; pack
cat $R/gpu.txt; grep -v "^  M=" $R/k/log.txt | tail -14; grep "^  M=" $R/k/log.txt | cut -c1-150

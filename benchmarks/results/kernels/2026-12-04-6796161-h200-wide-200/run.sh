#!/usr/bin/env bash
# One device call: kernels.py matmul over the whole suite (Llama-3-8B, -70B, Mixtral experts) with
# the deep13 space plus WIDE_N, tuned without Ray (tune -> pull -> bundle), then tuned vs cuBLAS
# interleaved (the command of ../2026-12-04-c743efc-h200-deep13-200/); then the WIDE_N GPU tests
# and matmul_sweep.py's wide grid (3 rounds).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit
R=/tmp/res; mkdir -p $R/k
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> $R/gpu.txt
nproc >> $R/gpu.txt
pack() { tar czf $OUT/results.tgz -C $R --exclude='*.db' --exclude='*.db-*' . ; }
timeout 450 python3 benchmarks/kernels.py --out-dir $R/k --kernels matmul --no-ray --trials 200 \
  --in-flight 16 --minutes 6.25 > $R/k/log.txt 2>&1
echo "kernels rc=$?" | tee -a $R/k/log.txt
gzip -kf $R/k/kernels.db 2>/dev/null; cp $R/k/kernels.db.gz $OUT/ 2>/dev/null; pack
cat $R/gpu.txt; grep -v "^  M=" $R/k/log.txt | tail -8
export TRITON_CACHE_DIR=/tmp/tcache PYTHONUNBUFFERED=1
timeout 60 python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu tests/search_spaces/test_matmul.py -k wide > $R/gpu_tests.txt 2>&1
tail -1 $R/gpu_tests.txt
timeout 90 python3 benchmarks/matmul_sweep.py --out $R/wide.json --grid wide --rounds 3 --jobs 16 > $R/wide_log.txt 2>&1
echo "sweep rc=$?" >> $R/wide_log.txt
pack
grep -E "^M=" $R/wide_log.txt | cut -c1-120
grep "^  M=" $R/k/log.txt | cut -c1-120

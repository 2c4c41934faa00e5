#!/usr/bin/env bash
# One device call (commit ea21aa0): kernels.py matmul over the whole suite (Llama-3-8B, -70B,
# Mixtral experts) tuned without Ray (tune -> pull -> bundle), then tuned vs cuBLAS interleaved;
# the learned sampler's studies share their ok times with the job's other studies. Then the
# WIDE_N GPU tests, compiled.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/k
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> $R/gpu.txt
pack() { tar czf $OUT/results.tgz -C $R --exclude='*.db' --exclude='*.db-*' . ; }
timeout 470 python3 benchmarks/kernels.py --out-dir $R/k --kernels matmul --no-ray --trials 200 \
  --in-flight 16 --minutes 6.25 > $R/k/log.txt 2>&1
echo "kernels rc=$?" | tee -a $R/k/log.txt
gzip -kf $R/k/kernels.db 2>/dev/null; cp $R/k/kernels.db.gz $OUT/ 2>/dev/null; pack
timeout 60 python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu tests/search_spaces/test_matmul.py -k wide > $R/gpu_tests.txt 2>&1
tail -1 $R/gpu_tests.txt; pack
grep -v "^  M=" $R/k/log.txt | tail -8
grep "^  M=" $R/k/log.txt | cut -c1-120 | awk 'NR>=20'

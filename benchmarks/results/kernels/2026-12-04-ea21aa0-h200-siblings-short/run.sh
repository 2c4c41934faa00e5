#!/usr/bin/env bash
# One device call (commit ea21aa0's sampler, at a9b930c): kernels.py matmul over the whole suite
# with a shorter tuning budget (5.5 minutes instead of 6.25), the job's studies sharing their
# trials; tuned vs cuBLAS interleaved. No GPU tests (the device time left was ~8.7 minutes).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/k
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> $R/gpu.txt
pack() { tar czf $OUT/results.tgz -C $R --exclude='*.db' --exclude='*.db-*' . ; }
timeout 420 python3 benchmarks/kernels.py --out-dir $R/k --kernels matmul --no-ray --trials 200 \
  --in-flight 16 --minutes 5.5 > $R/k/log.txt 2>&1
echo "kernels rc=$?" | tee -a $R/k/log.txt
gzip -kf $R/k/kernels.db 2>/dev/null; cp $R/k/kernels.db.gz $OUT/ 2>/dev/null; pack
grep -v "^  M=" $R/k/log.txt | tail -8

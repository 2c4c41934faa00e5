#!/usr/bin/env bash
# One device call: kernels.py matmul over the whole suite (Llama-3-8B, -70B, Mixtral experts) with
# the deep13 space (num_stages 2-6, 8, 10, 13; 832 K elements in flight), tuned without Ray (tune -> pull
# -> bundle), then tuned vs cuBLAS interleaved; the command of ../2026-12-04-3510b3e-h200-deep6-200-again/.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit
R=/tmp/res; mkdir -p $R/k
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> $R/gpu.txt
nproc >> $R/gpu.txt
pack() { tar czf $OUT/results.tgz -C $R --exclude='*.db' --exclude='*.db-*' . ; }
timeout 540 python3 benchmarks/kernels.py --out-dir $R/k --kernels matmul --no-ray --trials 200 \
  --in-flight 16 --minutes 6.25 > $R/k/log.txt 2>&1
echo "kernels rc=$?" | tee -a $R/k/log.txt
gzip -kf $R/k/kernels.db 2>/dev/null; cp $R/k/kernels.db.gz $OUT/ 2>/dev/null; pack
cat $R/gpu.txt; grep -v "^  M=" $R/k/log.txt | tail -14; grep "^  M=" $R/k/log.txt | cut -c1-150

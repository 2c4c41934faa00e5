#!/usr/bin/env bash
# One device call: fused_moe tuned over moe_sweep's issue grid (E 8/64/256, up and down, M 16-4096)
# without Ray, winners through pull, interleaved against torch._grouped_mm on the same routing.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
R=/tmp/res; mkdir -p $R/l
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> $R/gpu.txt
timeout 470 python3 benchmarks/llm_kernels.py --out-dir $R/l --kernels fused_moe --moe-grid issue --no-ray --trials 40 --in-flight 16 --minutes 3 > $R/l/log.txt 2>&1
echo "exit $?" >> $R/l/log.txt
gzip -kf $R/l/llm_kernels.db 2>/dev/null
tar czf $OUT/results.tgz -C $R --exclude='*.db' --exclude='*.db-*' .
cat $R/gpu.txt; grep -v "^  M=" $R/l/log.txt | tail -14; grep "^  M=" $R/l/log.txt | cut -c1-200 | tail -30

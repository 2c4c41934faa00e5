#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl2/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
R=/tmp/res; mkdir -p $R/l $R/t
git log --oneline -1 > $R/commit.txt 2>/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $R/gpu.txt
TRITON_INTERPRET=0 timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/search_spaces tests/workers > $R/t/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" | tee -a $R/t/gpu_tests.txt
tar czf $OUT/results.tgz -C $R --exclude='*.db' .
gunzip -c .dev/kern3/llm_kernels.db.gz > $R/l/llm_kernels.db
timeout 330 python3 benchmarks/llm_kernels.py --out-dir $R/l --kernels flash_attention \
  --no-tune --flash-grid issue-b1-8 > $R/l/log.txt 2>&1
echo "llm_kernels rc=$?" | tee -a $R/l/log.txt
tar czf $OUT/results.tgz -C $R --exclude='*.db' .
tail -3 $R/t/gpu_tests.txt
grep -v "^  batch\|GQA\|warn\|scaled_dot" $R/l/log.txt | tail -14

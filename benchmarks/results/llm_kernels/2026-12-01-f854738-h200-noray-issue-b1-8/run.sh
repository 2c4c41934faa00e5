#!/usr/bin/env bash
# Device call 2: llm_kernels.py flash_attention over the issue's grid at batch 1 and 8 (128
# problems), tuned without Ray (tune -> pull -> bundle), then tuned vs every SDPA backend.
set -u
R=/tmp/res; mkdir -p $R/l
B=.dev/kern3/benchmarks
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> $R/gpu.txt
pack() { tar czf $OUT/results.tgz -C $R --exclude='*.db' --exclude='*.db-*' . ; }
timeout 560 python3 $B/llm_kernels.py --out-dir $R/l --kernels flash_attention --no-ray \
  --trials 8 --in-flight 16 --minutes 3.0 --flash-grid issue-b1-8 > $R/l/log.txt 2>&1
echo "llm_kernels rc=$?" | tee -a $R/l/log.txt
gzip -kf $R/l/llm_kernels.db 2>/dev/null; pack
cat $R/gpu.txt; grep -v "^  batch\|GQA\|warn" $R/l/log.txt | tail -14
grep "^  batch" $R/l/log.txt | sed 's/pattern=uniform,//; s/q_heads=32,//' | cut -c1-60,100-230

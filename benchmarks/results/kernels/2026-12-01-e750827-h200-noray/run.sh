#!/usr/bin/env bash
# Device call 2: llm_kernels.py and kernels.py matmul (tune without Ray -> pull -> bundle), attention_sweep d128-long.
set -u
R=/tmp/res; mkdir -p $R/l $R/k $R/as
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> $R/gpu.txt
pack() { tar czf $OUT/results.tgz -C $R --exclude='*.db' --exclude='*.db-*' . ; }
timeout 200 python3 benchmarks/llm_kernels.py --out-dir $R/l --no-ray --trials 8 --minutes 0.5 > $R/l/log.txt 2>&1
gzip -kf $R/l/llm_kernels.db 2>/dev/null; pack
timeout 120 python3 benchmarks/kernels.py --out-dir $R/k --kernels matmul --no-ray --trials 20 --minutes 0.8 > $R/k/log.txt 2>&1
gzip -kf $R/k/kernels.db 2>/dev/null; pack
timeout 100 python3 benchmarks/attention_sweep.py --out $R/as/attention_ahead.json --grid d128-long --candidates ahead --rounds 2 > $R/as/attention_ahead.txt 2>&1
pack
cat $R/gpu.txt; grep -v "^  batch\|^  M=" $R/l/log.txt | tail -12; grep -v "^  M=" $R/k/log.txt | tail -8
grep "best c\|failed" $R/as/attention_ahead.txt | tail -18; grep -A3 geomean_vs_fastest_backend\" $R/as/attention_ahead.txt | head -4; grep -A6 '"wins"' $R/as/attention_ahead.txt

# One device call: flash_attention through tune -> pull -> bundle on attention_sweep's d128-long
# and d64-long grids (16 fp16 problems each: batch 1 and 8, seq 4096 and 8192, 32/32 and 32/8,
# causal and not); 9 trials per problem: the sm_90 default, the three SPLIT_M tiles and the five
# GLUON configs listed (256-key tiles do not fit at d=128: two invalid trials per study there).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
rm -rf $HOME/.triton/cache
for g in d128-long d64-long; do
  R=/tmp/l/$g; rm -rf $R; mkdir -p $R
  timeout 270 python3 benchmarks/llm_kernels.py --out-dir $R --kernels flash_attention --no-ray \
    --trials 9 --in-flight 16 --minutes 1.2 --flash-grid $g > $R/log.txt 2>&1
  echo "$g llm_kernels rc=$?" >> /tmp/l/rc.txt
  python3 -c "import sqlite3; s=sqlite3.connect('$R/llm_kernels.db'); d=sqlite3.connect('$R/copy.db'); s.backup(d)" && gzip -c $R/copy.db > $R/llm_kernels.db.gz
  rm -f $R/copy.db $R/llm_kernels.db $R/llm_kernels.db-wal $R/llm_kernels.db-shm
done
tar czf $OUT/results.tgz -C /tmp/l .
cat /tmp/l/rc.txt; for g in d128-long d64-long; do grep -v "enable_gqa\|UserWarning\|warnings.warn" /tmp/l/$g/log.txt | tail -14; done

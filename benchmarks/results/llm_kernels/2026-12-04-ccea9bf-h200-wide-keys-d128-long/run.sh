# One device call: flash_attention through tune -> pull -> bundle on attention_sweep's d128-long grid
# (16 problems: fp16, d=128, batch 1 and 8, seq 4096 and 8192, 32/32 and 32/8, causal and not);
# 8 trials per problem: the sm_90 default, the three SPLIT_M tiles and the four GLUON configs listed
# (the third persistent, the fourth with 256-key tiles, which does not fit at d=128: one invalid trial per study).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=/tmp/l; mkdir -p $R
timeout 230 python3 benchmarks/llm_kernels.py --out-dir $R --kernels flash_attention --no-ray \
  --trials 8 --in-flight 16 --minutes 1.2 --flash-grid d128-long > $R/log.txt 2>&1
echo "llm_kernels rc=$?" >> $R/rc.txt
python3 -c "import sqlite3; s=sqlite3.connect('$R/llm_kernels.db'); d=sqlite3.connect('$R/copy.db'); s.backup(d)" && gzip -c $R/copy.db > $R/llm_kernels.db.gz
rm -f $R/copy.db $R/llm_kernels.db $R/llm_kernels.db-wal $R/llm_kernels.db-shm
tar czf $OUT/results.tgz -C $R .
cat $R/rc.txt; grep -v "enable_gqa\|UserWarning\|warnings.warn" $R/log.txt | tail -40

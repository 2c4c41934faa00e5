#!/usr/bin/env bash
# Not run yet: the measurement that run.sh's call did not finish, from this folder's tune database,
# winners through `tunefleet pull` (--no-tune with no --best-db: llm_kernels.py pulls from
# OUT_DIR/llm_kernels.db). Stage the repo as .dev/kern3 and this folder's llm_kernels.db.gz beside
# it; about 3-4 minutes of measurement on one H200 (5 entries x 3 rounds x 128 problems).
set -u
R=/tmp/res; mkdir -p $R/l
gunzip -c .dev/kern3/llm_kernels.db.gz > $R/l/llm_kernels.db
timeout 500 python3 .dev/kern3/benchmarks/llm_kernels.py --out-dir $R/l --kernels flash_attention \
  --no-tune --flash-grid issue-b1-8 > $R/l/log.txt 2>&1
echo "llm_kernels rc=$?" | tee -a $R/l/log.txt
tar czf $OUT/results.tgz -C $R --exclude='*.db' .
grep -v "^  batch\|GQA\|warn\|scaled_dot" $R/l/log.txt | tail -12

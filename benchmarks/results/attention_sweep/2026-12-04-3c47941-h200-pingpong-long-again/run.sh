# One device call: the "pingpong" candidates (15 per problem) again over the issue's 96 problems at
# seq >= 4096, one round, on a fresh machine; tarred to $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
rm -rf $HOME/.triton/cache
R=/tmp/r; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $R/gpu.txt
timeout 560 python3 benchmarks/attention_sweep.py --out $R/attention_long.json --grid issue-long \
  --candidates pingpong --rounds 1 > $R/attention_long.txt 2>&1
echo "sweep rc=$?" >> $R/rc.txt
tar czf $OUT/results.tgz -C $R .
cat $R/rc.txt; grep -A8 '"summary"\|geomean_vs_fastest' $R/attention_long.txt | head -12

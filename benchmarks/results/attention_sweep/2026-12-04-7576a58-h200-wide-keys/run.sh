# One device call: GLUON with 256-key tiles (d=64 only: two 256x64 K/V tiles per stage) beside the
# strongest candidates of the persistent run, the issue's 96 head_dim-64 problems, two rounds.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=/tmp/r; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $R/gpu.txt
cp candidates.json $R/candidates.json
timeout 540 python3 benchmarks/attention_sweep.py --out $R/attention_bn256.json --grid issue \
  --only head_dim=64 --candidates candidates.json --rounds 2 --outside-space > $R/attention_bn256.txt 2>&1
echo "sweep rc=$?" >> $R/rc.txt
tar czf $OUT/results.tgz -C $R .
cat $R/rc.txt; tail -22 $R/attention_bn256.txt

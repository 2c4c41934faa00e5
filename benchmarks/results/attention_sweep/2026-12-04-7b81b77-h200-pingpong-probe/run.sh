# One device call: the ping-pong / split-release probe (probe.py), 8 d=128 problems at seq 4096-8192.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
rm -rf $HOME/.triton/cache
R=/tmp/r; rm -rf $R; mkdir -p $R
D=benchmarks/results/attention_sweep/2026-12-04-7b81b77-h200-pingpong-probe
# the probe imports gluon_variants.py from its folder: made from 7b81b77's kernel first (MANIFEST.md)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $R/gpu.txt
timeout 520 python3 $D/probe.py $R/probe.json > $R/probe.txt 2>&1
echo "probe rc=$?" >> $R/rc.txt
tar czf $OUT/results.tgz -C $R .
cat $R/rc.txt; grep -v "^\s*$" $R/probe.txt | tail -40

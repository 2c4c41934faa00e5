# One device call: flash_attention's GPU tests (three GLUON_PINGPONG cases among them), then the
# issue's 192-problem grid with the "pingpong" candidates (15 per problem), one round; tarred to $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
rm -rf $HOME/.triton/cache
R=/tmp/r; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $R/gpu.txt
TRITON_INTERPRET=0 timeout 170 python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu \
  tests/search_spaces/test_flash_attention.py > $R/gpu_tests.txt 2>&1
rc=$?
echo "gpu tests rc=$rc" >> $R/rc.txt
tail -3 $R/gpu_tests.txt
if [ $rc -eq 0 ]; then
  timeout 400 python3 benchmarks/attention_sweep.py --out $R/attention_pingpong.json --grid issue \
    --candidates pingpong --rounds 1 > $R/attention_pingpong.txt 2>&1
  echo "sweep rc=$?" >> $R/rc.txt
fi
tar czf $OUT/results.tgz -C $R .
cat $R/rc.txt; grep -v "^ok\|^  " $R/gpu_tests.txt | tail -15; tail -25 $R/attention_pingpong.txt

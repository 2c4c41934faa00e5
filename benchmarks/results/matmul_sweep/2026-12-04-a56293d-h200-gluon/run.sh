#!/usr/bin/env bash
# Device call (repo root): GLUON's GPU tests, then matmul_sweep.py's gluon grid (3 rounds) if
# they pass; per shape the best GLUON candidate against the best suite winner and cuBLAS.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tcache
R=/tmp/res; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv > $R/gpu.txt 2>&1
timeout 200 python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu tests/search_spaces/test_matmul.py -k gluon > $R/gpu_tests.txt 2>&1
T=$?
tail -15 $R/gpu_tests.txt
if [ $T -eq 0 ]; then
  timeout 330 python3 benchmarks/matmul_sweep.py --out $R/sweep.json --grid gluon --rounds 3 --jobs 16 > $R/log.txt 2>&1
  echo "sweep rc=$?" | tee -a $R/log.txt
fi
cp $R/* $OUT/ 2>/dev/null
grep -E "^M=|compiled|failed|not in the space" $R/log.txt | cut -c1-230
python3 - <<'PY'
import json, pathlib
p = pathlib.Path("/tmp/res/sweep.json")
if p.exists():
    d = json.loads(p.read_text())
    print({k: v for k, v in d.get("summary", {}).items() if k != "compile_failures"})
PY

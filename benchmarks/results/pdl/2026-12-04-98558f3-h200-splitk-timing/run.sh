#!/usr/bin/env bash
# One device call: probe.py (split-K + PDL timing paths), then the matmul GPU tests compiled
# (TRITON_INTERPRET=0), WIDE_N's among them.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
D=benchmarks/results/pdl/2026-12-04-98558f3-h200-splitk-timing
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
timeout 100 python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu tests/search_spaces/test_matmul.py > $OUT/gpu_tests_compiled.txt 2>&1
tail -2 $OUT/gpu_tests_compiled.txt
timeout 300 python3 $D/probe.py $OUT/probe.json > $OUT/probe_log.txt 2>&1; echo "probe rc=$?"
tail -12 $OUT/probe_log.txt

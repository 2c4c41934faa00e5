#!/usr/bin/env bash
# One device call: probe_load.py (timer before and after the hold, CPU idle and loaded), then the
# workers' GPU tests compiled (the hold's test among them).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
D=benchmarks/results/pdl/2026-12-04-98558f3-h200-splitk-timing
timeout 120 python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu tests/workers/ > $OUT/gpu_tests_workers.txt 2>&1
tail -2 $OUT/gpu_tests_workers.txt
timeout 300 python3 $D/probe_load.py $OUT/probe_load.json > $OUT/probe_load_log.txt 2>&1; echo "probe rc=$?"
tail -17 $OUT/probe_load_log.txt

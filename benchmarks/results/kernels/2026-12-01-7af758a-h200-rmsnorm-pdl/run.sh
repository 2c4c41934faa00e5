#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 8d6378b: the
# GPU-marked tests (with the new PDL chain test), then issue 4 item 5 for rmsnorm by the graph
# objective in the 352-config space with PDL: `python benchmarks/kernels.py --kernels rmsnorm
# --objective graph --trials 60`. Output in $OUT/results.tgz.
set -u
R=$OUT/r
mkdir -p "$R"
bash benchmarks/runs/byte_compile_wheels.sh
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rA tests > "$R/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; grep -E "^(PASSED|FAILED|ERROR|SKIPPED)" "$R/gpu_tests.txt"; tail -n 2 "$R/gpu_tests.txt"
timeout 360 python3 benchmarks/kernels.py --out-dir "$R/k" --kernels rmsnorm --objective graph \
  --trials 60 --in-flight 16 > "$R/log.txt" 2> "$R/err.txt"
echo "kernels rc=$?"; grep -v WARN "$R/err.txt" | tail -n 3
gzip "$R/k/kernels.db"
tail -n 14 "$R/log.txt"
tar czf "$OUT/results.tgz" -C "$R" .

#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 8d6378b: the
# GPU-marked tests (with paged attention's PDL graph test), then benchmarks/pdl.py: a graph-
# objective tune job per kernel (paged_attention decode shapes, rmsnorm), then each tuned config
# with PDL off and on, back to back. Output in $OUT/results.tgz.
set -u
R=$OUT/r
mkdir -p "$R"
bash benchmarks/runs/byte_compile_wheels.sh
timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider -rA tests > "$R/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)" "$R/gpu_tests.txt"; tail -n 1 "$R/gpu_tests.txt"
timeout 250 python3 benchmarks/pdl.py --out-dir "$R/p" --kernels paged_attention rmsnorm \
  --trials 30 --in-flight 16 > "$R/log.txt" 2> "$R/err.txt"
echo "pdl rc=$?"; grep -v WARN "$R/err.txt" | tail -n 3
gzip "$R/p/pdl.db"
cat "$R/log.txt"
tar czf "$OUT/results.tgz" -C "$R" .

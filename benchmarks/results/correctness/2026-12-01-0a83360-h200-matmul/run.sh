#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH set), at commit 2d6a705: the
# GPU-marked tests, then benchmarks/correctness.py for matmul (5 random valid configs per problem of the space
# with TMA and wider split-K, through the real trial runner). Everything lands in $OUT/results.tgz.
set -u
R=$OUT/r
mkdir -p "$R"
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests > "$R/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; tail -n 3 "$R/gpu_tests.txt"
timeout 200 python3 benchmarks/correctness.py --kernels matmul --configs 5 --out "$R/correctness.json" \
  > "$R/correctness.txt" 2>&1
echo "correctness rc=$?"; tail -n 6 "$R/correctness.txt"
tar czf "$OUT/results.tgz" -C "$R" .

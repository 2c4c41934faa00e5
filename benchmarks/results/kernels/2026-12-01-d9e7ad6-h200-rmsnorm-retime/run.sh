#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, wheels installed, PYTHONPATH=/tmp/site:$PWD), at commit 8d6378b:
# (1) the new test that a job's stored best times match its trials', run against the code before
# the fix (old_head/: `git archive` of the previous commit, with the new test file copied in);
# (2) all GPU-marked tests on the fixed code; (3) kernels.py rmsnorm by the graph objective again,
# so that in-job best times can be compared with the benchmark's re-timing.
set -u
R=$OUT/r
mkdir -p "$R"
bash benchmarks/runs/byte_compile_wheels.sh
cp tests/orchestrator/test_objective_gpu.py old_head/tests/orchestrator/
(cd old_head && PYTHONPATH=/tmp/site:$PWD timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -rA tests/orchestrator/test_objective_gpu.py -k many_problem > "$R/old_code_test.txt" 2>&1)
echo "old code rc=$?"; grep -E "^(PASSED|FAILED|ERROR)|AssertionError" "$R/old_code_test.txt" | head -5
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rA tests > "$R/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)" "$R/gpu_tests.txt"; tail -n 1 "$R/gpu_tests.txt"
timeout 300 python3 benchmarks/kernels.py --out-dir "$R/k" --kernels rmsnorm --objective graph \
  --trials 60 --in-flight 16 > "$R/log.txt" 2> "$R/err.txt"
echo "kernels rc=$?"; grep -v WARN "$R/err.txt" | tail -n 3
gzip "$R/k/kernels.db"
tail -n 14 "$R/log.txt"
tar czf "$OUT/results.tgz" -C "$R" .

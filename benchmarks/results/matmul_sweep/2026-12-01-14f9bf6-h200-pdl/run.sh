#!/usr/bin/env bash
# Device call: the matmul and PDL GPU tests (compiled), then matmul_sweep.py's pdl grid (8 split-K
# configs with and without PDL x 16 problems at M <= 128) against cuBLAS, interleaved, 3 rounds.
# Run from the staged worktree (.dev/kernels) with PYTHONPATH=/tmp/site:$PWD.
set -u
R=/tmp/res; mkdir -p $R
TRITON_INTERPRET=0 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rA tests/search_spaces/test_matmul.py tests/search_spaces/test_pdl.py > $R/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" | tee -a $R/gpu_tests.txt; grep -E "passed|failed|FAILED|Error" $R/gpu_tests.txt | tail -8
timeout 300 python3 benchmarks/matmul_sweep.py --out $R/sweep.json --grid pdl --rounds 3 --jobs 16 > $R/log.txt 2>&1
echo "sweep rc=$?" | tee -a $R/log.txt
cp $R/* $OUT/ 2>/dev/null
grep -v '^ ' $R/log.txt | grep -v '^[{}]' | tail -20
python3 - <<'PY'
import json
d = json.load(open("/tmp/res/sweep.json"))
cands = d["candidates"]
for r in d["rows"]:
    p = r["problem"]; cub = r["cublas_ms"]; t = r["ms"]
    pairs = []
    for i in range(0, len(cands), 2):
        a, b = t.get(f"c{i}"), t.get(f"c{i+1}")
        if a and b: pairs.append(f"{cub/a:.3f}/{cub/b:.3f}")
    best = min((v, k) for k, v in t.items() if k != "cublas")
    print(f"M={p['M']:<4} N={p['N']:<6} K={p['K']:<6} cuBLAS {cub*1e3:6.1f} best {best[1]} {best[0]*1e3:6.1f} x{cub/best[0]:.3f} | off/on: {' '.join(pairs)}")
PY

#!/usr/bin/env bash
# Device call: matmul GPU race tests (compiled, TRITON_INTERPRET=0), then matmul_sweep.py's waves
# grid: 24 candidates x 4 few-tile shapes against cuBLAS, interleaved, 3 rounds.
# Run from the staged worktree (.dev/kernels) with PYTHONPATH=/tmp/site:$PWD.
set -u
R=/tmp/res; mkdir -p $R
TRITON_INTERPRET=0 timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rA tests/search_spaces/test_matmul.py > $R/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" | tee -a $R/gpu_tests.txt; grep -E "passed|failed|PASSED|FAILED" $R/gpu_tests.txt | tail -12
timeout 300 python3 benchmarks/matmul_sweep.py --out $R/sweep.json --grid waves --rounds 3 --jobs 16 > $R/log.txt 2>&1
echo "sweep rc=$?" | tee -a $R/log.txt
cp $R/* $OUT/ 2>/dev/null
cat $R/log.txt | tail -8
python3 - <<'PY'
import json
d = json.load(open("/tmp/res/sweep.json"))
cands = d["candidates"]
for r in d["rows"]:
    p = r["problem"]; cub = r["cublas_ms"]
    print(f"M={p['M']} N={p['N']} K={p['K']} cublas {cub*1e3:.1f} us")
    t = r.get("medians_ms") or r.get("ms") or {}
    for k, v in sorted(t.items(), key=lambda kv: kv[1]):
        if k == "cublas": continue
        c = cands[int(k[1:])]
        tag = f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} w{c['num_warps']} s{c['num_stages']} sk{c['SPLIT_K']}{'F' if c['FUSED_REDUCE'] else ''}{' SK' if c['STREAM_K'] else ''}"
        print(f"  {k:>4} {tag:<32} {v*1e3:7.1f} us  x{cub/v:.3f}")
PY

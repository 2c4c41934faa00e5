#!/usr/bin/env bash
# Device call (repo root, PYTHONPATH=$PWD): matmul_sweep.py's deep grid, 20 candidates x 4
# few-tile shapes against cuBLAS, interleaved, 3 rounds; a table of each shape's candidates last.
set -u
R=/tmp/res; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv > $R/gpu.txt 2>&1
timeout 400 python3 benchmarks/matmul_sweep.py --out $R/sweep.json --grid deep --outside-space --rounds 3 --jobs 16 > $R/log.txt 2>&1
echo "sweep rc=$?" | tee -a $R/log.txt
python3 - > $R/table.txt <<'PY'
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
        tag = f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} w{c['num_warps']} s{c['num_stages']} sk{c['SPLIT_K']}{'F' if c['FUSED_REDUCE'] else ''}"
        print(f"  {k:>4} {tag:<28} {v*1e3:7.1f} us  x{cub/v:.3f}")
PY
cp $R/* $OUT/ 2>/dev/null
tail -6 $R/log.txt
head -30 $R/table.txt

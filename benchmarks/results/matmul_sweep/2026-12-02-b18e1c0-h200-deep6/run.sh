#!/usr/bin/env bash
# Device call (repo root, PYTHONPATH=$PWD): matmul_sweep.py's deep6 grid, 30 candidates x 24
# few-tile shapes against cuBLAS, interleaved, 3 rounds; a table of each shape's candidates last.
set -u
R=/tmp/res; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv > $R/gpu.txt 2>&1
timeout 400 python3 benchmarks/matmul_sweep.py --out $R/sweep.json --grid deep6 --outside-space --rounds 3 --jobs 16 > $R/log.txt 2>&1
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
python3 - <<'PY'
import json
from search_spaces import get_spec
from workers.device import detect
d = json.load(open("/tmp/res/sweep.json"))
cands = d["candidates"]
space, lim = get_spec("matmul").space, detect("auto")[0].limits()
inside = {f"c{i}" for i, c in enumerate(cands) if space.violation(c, lim) is None}
for r in d["rows"]:
    p = r["problem"]; cub = r["cublas_ms"]; t = r.get("medians_ms") or r.get("ms") or {}
    a = min((v, k) for k, v in t.items() if k in inside)
    b = min((v, k) for k, v in t.items() if k != "cublas" and k not in inside)
    print(f"M={p['M']:<4} N={p['N']:<6} K={p['K']:<6} in {cub/a[0]:.3f} {a[1]:>4}  out {cub/b[0]:.3f} {b[1]:>4}  gain {a[0]/b[0]:.3f}")
PY

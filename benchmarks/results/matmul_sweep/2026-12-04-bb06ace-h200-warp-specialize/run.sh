#!/usr/bin/env bash
# Device call (repo root): probe each ws candidate alone (90 s each, 8 at once: a hang or a crash
# shows as such), matmul GPU tests, then matmul_sweep.py's ws grid without the candidates that
# hung or crashed (2 rounds); per shape the best warp-specialized and the best other candidate.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl3/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R
export TRITON_CACHE_DIR=/tmp/tcache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv > $R/gpu.txt 2>&1
seq 0 28 | xargs -P 8 -I{} sh -c 'timeout 90 python3 benchmarks/results/matmul_sweep/2026-12-04-bb06ace-h200-warp-specialize/probe_ws.py {} > /tmp/res/probe_{}.txt 2>&1; echo "c{} rc=$?" >> /tmp/res/probe_{}.txt'
for i in $(seq 0 28); do grep -E "^c[0-9]+ " $R/probe_$i.txt; done > $R/probe.txt
rm -f $R/probe_*.txt
SKIP=$(python3 - <<'PY'
import re
bad = set()
ok = {}
for line in open("/tmp/res/probe.txt"):
    m = re.match(r"c(\d+) (rc=(\d+)|.* OK)", line)
    if not m: continue
    i = int(m.group(1))
    if m.group(3) is not None:
        if m.group(3) != "0": bad.add(i)
    else: ok[i] = ok.get(i, 0) + 1
bad |= {i for i in range(30) if ok.get(i, 0) < 3}
print(",".join(map(str, sorted(bad))))
PY
)
echo "skip: $SKIP" | tee $R/skip.txt
grep -v " OK " $R/probe.txt | head -40
TRITON_INTERPRET=0 timeout 200 python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu tests/search_spaces/test_matmul.py -k "warp_specialized or race_free" > $R/gpu_tests.txt 2>&1
tail -3 $R/gpu_tests.txt
timeout 330 python3 benchmarks/matmul_sweep.py --out $R/sweep.json --grid ws --rounds 2 --jobs 16 --skip "$SKIP" > $R/log.txt 2>&1
echo "sweep rc=$?" | tee -a $R/log.txt
python3 - > $R/table.txt <<'PY'
import json
d = json.load(open("/tmp/res/sweep.json"))
cands = d["candidates"]
for r in d["rows"]:
    p = r["problem"]; cub = r["cublas_ms"]
    print(f"M={p['M']} N={p['N']} K={p['K']} cublas {cub*1e3:.1f} us")
    for k, v in sorted(r["ms"].items(), key=lambda kv: kv[1]):
        if k == "cublas": continue
        c = cands[int(k[1:])]
        tag = f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} w{c['num_warps']} s{c['num_stages']} sk{c['SPLIT_K']}{'F' if c['FUSED_REDUCE'] else ''}{' WS' if c.get('WARP_SPECIALIZE') else ''}"
        print(f"  {k:>4} {tag:<32} {v*1e3:7.1f} us  x{cub/v:.3f}")
PY
python3 - > $R/summary.txt <<'PY'
import json, math
d = json.load(open("/tmp/res/sweep.json"))
cands = d["candidates"]
ws = {f"c{i}" for i, c in enumerate(cands) if c.get("WARP_SPECIALIZE")}
g = {"ws": [], "other": [], "best": []}
for r in d["rows"]:
    p = r["problem"]; cub = r["cublas_ms"]; t = r["ms"]
    a = min((v, k) for k, v in t.items() if k != "cublas" and k not in ws)
    b = min((v, k) for k, v in t.items() if k in ws)
    g["other"].append(cub / a[0]); g["ws"].append(cub / b[0]); g["best"].append(cub / min(a[0], b[0]))
    print(f"M={p['M']:<4} N={p['N']:<6} K={p['K']:<6} cuBLAS {cub*1e3:6.1f} us  other {cub/a[0]:.3f} {a[1]:>4}  ws {cub/b[0]:.3f} {b[1]:>4}  ws/other {a[0]/b[0]:.3f}")
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
for k, xs in g.items():
    print(f"geomean {k}: {gm(xs):.3f}x cuBLAS, min {min(xs):.3f}x, below 0.9x: {sum(x < 0.9 for x in xs)}")
PY

cp $R/* $OUT/ 2>/dev/null
tail -4 $R/log.txt
cat $R/summary.txt

#!/usr/bin/env bash
# One nvidia-h200 device call (repo root, PYTHONPATH=$PWD), at commit 000c6c1, after rmsnorm's space gained
# STREAMING (cache hints: x's last read evict-first, w evict-last, y stored .cs): every config of
# both settings checked and timed alone and back to back (benchmarks/stream_timing.py).
# Needs only torch and triton. Output in $OUT/results.tgz.
set -u
R=$OUT/r
mkdir -p "$R"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$R/gpu.txt"
timeout 500 python3 benchmarks/stream_timing.py --json "$R/stream_timing.json" > "$R/stream_timing.txt" 2>&1
echo "stream_timing rc=$?"
python3 - "$R/stream_timing.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("problem | STREAMING | best alone (us) | best back to back (us)")
for r in d["results"]:
    good = [x for x in r["rows"] if "stream_ms" in x]
    for on in (False, True):
        rows = [x for x in good if x["config"].get("STREAMING") is on]
        print(r["problem"], on, f"{min(x['isolated_ms'] for x in rows) * 1e3:.2f}",
              f"{min(x['stream_ms'] for x in rows) * 1e3:.2f}")
PY
gzip "$R/stream_timing.json"
tail -n 9 "$R/stream_timing.txt"
tar czf "$OUT/results.tgz" -C "$R" .

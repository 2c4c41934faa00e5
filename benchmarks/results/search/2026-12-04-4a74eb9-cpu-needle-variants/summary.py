"""One line per search.py --json file: the mean of the 2% medians and each landscape's median / p90.

Usage: python3 benchmarks/results/search/2026-12-04-4a74eb9-cpu-needle-variants/summary.py FILE.json ...
"""

import json
import statistics
import sys

for path in sys.argv[1:]:
    with open(path) as f:
        rows = json.load(f)["results"]
    med = [r["trials_to_2pct"]["median"] for r in rows]
    p90 = [r["trials_to_2pct"]["p90"] for r in rows]
    met = sum(m <= 20 and p <= 50 for m, p in zip(med, p90, strict=True))
    cells = " ".join(f"{m:g}/{p:g}" for m, p in zip(med, p90, strict=True))
    print(f"{path}: mean of medians {statistics.fmean(med):.2f}, met {met}/{len(rows)} | {cells}")

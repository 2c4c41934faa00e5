"""Per search.py --json file and sampler row: landscapes meeting median <= 5 and p90 <= 15 trials
to within 2%, the mean of the medians and of the p90s, and the misses.

Usage: python3 benchmarks/results/search/2026-12-04-c8269d4-cpu-information-limits/summary.py FILE.json ...
"""

import json
import statistics
import sys

for path in sys.argv[1:]:
    with open(path) as f:
        rows = json.load(f)["results"]
    for sampler in dict.fromkeys(r["sampler"] for r in rows):
        cells = [
            (r["landscape"], r["trials_to_2pct"]["median"], r["trials_to_2pct"]["p90"])
            for r in rows
            if r["sampler"] == sampler
        ]
        met = [c for c in cells if c[1] <= 5 and c[2] <= 15]
        misses = "; ".join(f"{n} {m:g} / {p:g}" for n, m, p in cells if (n, m, p) not in met)
        print(
            f"{path.rsplit('/', 1)[-1]} {sampler}: met {len(met)} of {len(cells)},"
            f" mean of medians {statistics.fmean(c[1] for c in cells):.2f},"
            f" of p90s {statistics.fmean(c[2] for c in cells):.2f}; misses: {misses}"
        )

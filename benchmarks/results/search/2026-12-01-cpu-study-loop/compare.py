"""Row by row, the re-run against the recorded table: every metric but wall time.

Usage: python compare.py OLD_DIR NEW_DIR (each holding the three search_h200_*.json files).
"""

import json
import sys

FIELDS = (
    "space",
    "space_kind",
    "seeds",
    "trials_to_2pct",
    "trials_to_5pct",
    "best_ratio_after",
    "asks_per_trial",
    "rejected_per_trial",
    "cached_per_trial",
    "seeds_that_drew",
    "warm_start",
)
NAMES = ("search_h200_matmul_4096", "search_h200_matmul_suite", "search_h200_rmsnorm_suite")

old_dir, new_dir = sys.argv[1], sys.argv[2]
for name in NAMES:
    rows = {}
    for where in (old_dir, new_dir):
        with open(f"{where}/{name}.json") as f:
            rows[where] = {(r["landscape"], r["sampler"]): r for r in json.load(f)["results"]}
    old, new = rows[old_dir], rows[new_dir]
    same = 0
    for key, row in new.items():
        before = old.get(key)
        if before is None:
            print(f"{name}: {key} is new")
            continue
        changed = {f: (before.get(f), row.get(f)) for f in FIELDS if before.get(f) != row.get(f)}
        if changed:
            print(f"{name}: {key} changed: {changed}")
        else:
            same += 1
    missing = sorted(set(old) - set(new))
    print(
        f"{name}: {same} of {len(new)} rows identical in every metric but wall time; "
        f"{len(missing)} recorded rows not re-run"
    )

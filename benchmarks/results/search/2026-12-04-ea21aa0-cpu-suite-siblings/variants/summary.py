"""One line per variant's JSON (search_suite.py --json): the learned+siblings rows against the
same job unshared, over the landscapes: mean of the per-landscape median trials to 2%, the worst
median and p90, landscapes whose median exceeds 20, landscapes more than 10% worse unshared."""

import json
import statistics
import sys

for path in sys.argv[1:]:
    with open(path) as f:
        rows = json.load(f)["results"]
    alone = {r["landscape"]: r["trials_to_2pct"] for r in rows if r["sampler"] == "learned"}
    shared = [r for r in rows if r["sampler"] == "learned+siblings"]
    med = [r["trials_to_2pct"]["median"] for r in shared]
    worse = sum(m > 1.1 * alone[r["landscape"]]["median"] for r, m in zip(shared, med, strict=True))
    print(
        f"{path.rsplit('/', 1)[-1]:<30} mean median {statistics.mean(med):5.1f} "
        f"(unshared {statistics.mean(a['median'] for a in alone.values()):5.1f})  "
        f"worst median {max(med):5.1f}  worst p90 {max(r['trials_to_2pct']['p90'] for r in shared):5.1f}  "
        f"median > 20: {sum(m > 20 for m in med):2d}  > 10% worse than unshared: {worse}"
    )

"""Group geomeans of this folder's sweep: the best of each candidate subset over the fastest SDPA
backend, per problem group, and the winners at seq >= 4096.

Usage (repo root): python3 benchmarks/results/attention_sweep/2026-12-04-c93fd3e-h200-pingpong-all/groups.py [FILE.json]
(default: this folder's attention_pingpong.json; any sweep of the "pingpong" candidates)
"""

import json
import math
import statistics
import sys
from pathlib import Path

SOURCE = (
    Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "attention_pingpong.json"
)
ROWS = json.loads(SOURCE.read_text())["rows"]
SUBSETS = {
    "best of 15": range(15),
    "c0-c11 (the earlier run's 12)": range(12),
    "c0-c12 (no ping-pong)": range(13),
    "c12": [12],
    "c13": [13],
    "c14": [14],
    "c13 or c14": [13, 14],
}
GROUPS = {
    "all": lambda p: True,
    "seq >= 4096": lambda p: p["max_seqlen"] >= 4096,
    "d=128, seq >= 4096": lambda p: p["max_seqlen"] >= 4096 and p["head_dim"] == 128,
    "d=64, seq >= 4096": lambda p: p["max_seqlen"] >= 4096 and p["head_dim"] == 64,
    "causal, seq >= 4096": lambda p: p["causal"] and p["max_seqlen"] >= 4096,
    "not causal, seq >= 4096": lambda p: not p["causal"] and p["max_seqlen"] >= 4096,
    "seq <= 1024": lambda p: p["max_seqlen"] <= 1024,
    "batch 1": lambda p: p["batch"] == 1,
    "batch 8": lambda p: p["batch"] == 8,
    "batch 32": lambda p: p["batch"] == 32,
}


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def main() -> None:
    print("| group | problems | " + " | ".join(SUBSETS) + " |")
    print("|---|---|" + "---|" * len(SUBSETS))
    for name, member in GROUPS.items():
        rows = [r for r in ROWS if member(r["problem"])]
        if not rows:
            continue
        cells = [
            geomean(
                [
                    r["fastest_backend_ms"]
                    / min(r["ms"][f"c{i}"] for i in ids if f"c{i}" in r["ms"])
                    for r in rows
                ]
            )
            for ids in SUBSETS.values()
        ]
        print(f"| {name} | {len(rows)} | " + " | ".join(f"{c:.3f}x" for c in cells) + " |")
    long = [r for r in ROWS if r["problem"]["max_seqlen"] >= 4096]
    counts = {c: sum(r["best"] == c for r in long) for c in sorted({r["best"] for r in long})}
    print(f"\nwinners at seq >= 4096: {counts}")
    worst = min(long, key=lambda r: r["vs_fastest_backend"])
    print(f"lowest at seq >= 4096: {worst['vs_fastest_backend']:.3f}x {worst['problem']}")
    print(
        f"largest error / tolerance: {max(r['winner_max_rel_error'] / r['tolerance'] for r in ROWS):.3f}"
    )


if __name__ == "__main__":
    main()

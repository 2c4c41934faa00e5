"""Per server and class, from the stats of a run with ``occupancy_sampling.patch``: the share of
the 0.1 s samples after ``--from-s`` in which the class had a job, and the share of its workers
running in those samples and in the others (classes are named by their last six characters).

    python3 occupancy.py RUN_DIR [--from-s 20]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def _mean(xs: list[float]) -> str:
    return f"{100 * sum(xs) / len(xs):.1f}%" if xs else "-"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run", type=Path)
    parser.add_argument("--from-s", type=float, default=20.0)
    args = parser.parse_args()
    print("| server | class | samples with a job | workers running, with a job | without |")
    print("|---|---|---:|---:|---:|")
    for i in (0, 1):
        samples = json.loads((args.run / f"server{i}.stats.json").read_text())["samples"]
        t0 = samples[0][0]
        by_class: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
        for at, *pools in samples:
            if at - t0 < args.from_s:
                continue
            for label, views, _heap, _due, running, workers, _routed in pools:
                by_class[label][0 if views else 1].append(running / workers)
        for label, (wanted, idle) in sorted(by_class.items()):
            share = 100 * len(wanted) / (len(wanted) + len(idle))
            print(f"| server{i} | {label} | {share:.0f}% | {_mean(wanted)} | {_mean(idle)} |")


if __name__ == "__main__":
    main()

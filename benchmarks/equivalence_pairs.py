"""How alike the configs that ``KernelSpec.equivalence`` puts in one class ran, in recorded landscapes.

Usage (repo root): python benchmarks/equivalence_pairs.py FILE [FILE ...] [--json]
For each landscape of a shipped kernel whose spec has an equivalence: every pair of ``ok`` configs
that differ in one parameter only, a parameter the equivalence changes in some config (matmul:
GROUP_M), split into pairs of one class (the spec's representative is the same) and pairs of two
classes; per group the median, p10 and p90 of the slower/faster time ratio minus 1. Pairs of one
class should differ by noise only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from search_spaces.registry import get_spec
from search_spaces.space import config_key
from workers.landscape import read_landscape
from workers.measurement import Outcome


def _spread(ratios: list[float]) -> dict[str, Any]:
    if not ratios:
        return {"pairs": 0}
    ordered = sorted(ratios)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {
        "pairs": len(ordered),
        "median_pct": round(100 * (statistics.median(ordered) - 1), 3),
        "p10_pct": round(100 * (at(0.1) - 1), 3),
        "p90_pct": round(100 * (at(0.9) - 1), 3),
    }


def pairs(path: Path) -> dict[str, Any] | None:
    """The pair statistics of one landscape, or None when its spec has no equivalence."""
    landscape = read_landscape(path)
    representative = get_spec(landscape.kernel).equivalence(landscape.problem)
    if representative is None:
        return None
    times = {
        config_key(r.config): (r.config, r.time_ms)
        for r in landscape.results
        if r.outcome is Outcome.OK and r.time_ms
    }
    merged = {  # the parameters the equivalence ever changes
        name
        for config, _ in times.values()
        for name, value in representative(config).items()
        if config[name] != value
    }
    by_rest: dict[tuple[str, str], list[tuple[dict[str, Any], float]]] = defaultdict(list)
    for config, time_ms in times.values():
        for name in merged:
            rest = config_key({k: v for k, v in config.items() if k != name})
            by_rest[name, rest].append((dict(config), time_ms))
    same: list[float] = []
    apart: list[float] = []
    for group in by_rest.values():
        for (a, ta), (b, tb) in itertools.combinations(group, 2):
            ratio = max(ta, tb) / min(ta, tb)
            alike = config_key(representative(a)) == config_key(representative(b))
            (same if alike else apart).append(ratio)
    return {"landscape": path.name, "one_class": _spread(same), "two_classes": _spread(apart)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [row for row in map(pairs, args.files) if row is not None]
    if args.json:
        print(json.dumps({"results": rows}, indent=1))
        return
    print(
        "| landscape | one class: pairs | median | p10-p90 | two classes: pairs | median | p10-p90 |"
    )
    print("|---|---:|---:|---|---:|---:|---|")
    for r in rows:
        cells = []
        for group in (r["one_class"], r["two_classes"]):
            if not group["pairs"]:
                cells += ["0", "-", "-"]
                continue
            cells += [
                str(group["pairs"]),
                f"{group['median_pct']:.2f}%",
                f"{group['p10_pct']:.2f}-{group['p90_pct']:.2f}%",
            ]
        print(f"| {r['landscape']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

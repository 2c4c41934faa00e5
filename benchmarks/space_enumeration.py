"""How long listing a space's valid configs takes: ``Space.enumerate`` (each constraint checked as
soon as its last parameter is set, whole subtrees skipped) against the full product loop it
replaced (every combination built, then every constraint checked).

Usage (repo root, CPU): python benchmarks/space_enumeration.py [--rounds 3]
For every built-in spec on the H200, MI300X and A100 limits: the configs of both (they must be the
same, in the same order, else it exits 1), and the best of ``--rounds`` timings of each.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable

from search_spaces.registry import all_specs
from search_spaces.space import Config, DeviceLimits, Space
from workers.device_table import lookup

DEVICES = ("H200", "MI300X", "A100")


def product_loop(space: Space, limits: DeviceLimits) -> list[Config]:
    """The valid configs the way ``Space.iter_valid`` listed them before commit e268991."""
    present = space.params_for(limits.vendor)
    names = [p.name for p in present]
    active = [c for c in space.constraints if set(c.uses) <= set(names)]
    out = []
    for combo in itertools.product(*(p.values for p in present)):
        config = dict(zip(names, combo, strict=True))
        if all(c.check(config, limits) for c in active):
            out.append(config)
    return out


def best_of(
    rounds: int, fn: Callable[[Space, DeviceLimits], list[Config]], space: Space, lim: DeviceLimits
) -> tuple[float, list[Config]]:
    """The fastest of ``rounds`` timings of ``fn(space, lim)``, and its result."""
    times, result = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn(space, lim)
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{'kernel':<16} {'device':<7} {'valid':>6} {'product loop s':>15} {'enumerate s':>12} "
          f"{'speedup':>8}")  # fmt: skip
    for spec in all_specs():
        for device in DEVICES:
            limits = lookup(device).limits
            old_s, old = best_of(args.rounds, product_loop, spec.space, limits)
            new_s, new = best_of(args.rounds, Space.enumerate, spec.space, limits)
            if old != new:
                raise SystemExit(f"{spec.name} on {device}: the two listings differ")
            print(f"{spec.name:<16} {device:<7} {len(new):>6} {old_s:>15.3f} {new_s:>12.3f} "
                  f"{old_s / new_s:>7.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()

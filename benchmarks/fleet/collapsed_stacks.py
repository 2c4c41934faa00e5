"""Where a process's time went, from a sampling profiler's collapsed stacks (one line per stack:
``frame;frame;... count``, as ``py-spy record --format raw`` writes them).

    py-spy record -p PID --duration 50 -r 40 --gil --nonblocking -f raw -o server0.raw
    python3 benchmarks/fleet/collapsed_stacks.py server0.raw [--top 70]

With ``--gil`` py-spy samples only the thread holding the interpreter lock: the shares are of the
process's Python CPU time. Prints each function's inclusive share (its samples anywhere on the
stack), then the top self shares (the innermost frame). Frames are named ``function (file)``,
line numbers dropped, so a function's samples add up across its lines.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r":\d+\)$")


def frame_name(frame: str) -> str:
    """``f (path/file.py:12)`` -> ``f (path/file.py)``."""
    return _LINE.sub(")", frame)


def shares(lines: list[str]) -> tuple[int, Counter[str], Counter[str]]:
    """(samples, inclusive samples by function, self samples by function)."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in lines:
        line = line.rstrip()
        if not line:
            continue
        stack, count = line.rsplit(" ", 1)
        n = int(count)
        frames = [frame_name(f) for f in stack.split(";")]
        total += n
        for f in set(frames):
            inclusive[f] += n
        own[frames[-1]] += n
    return total, inclusive, own


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("--top", type=int, default=70)
    args = parser.parse_args()
    total, inclusive, own = shares(args.raw.read_text().splitlines())
    print(f"{total} samples")
    for name, n in inclusive.most_common(args.top):
        print(f"{100 * n / total:5.1f}% {name}")
    print("--- self")
    for name, n in own.most_common(25):
        print(f"{100 * n / total:5.1f}% {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

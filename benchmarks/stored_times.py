"""A recorded kernels.py report: each tune job's stored best time over the tuned time that
kernels.py measured afterwards, per problem (1.0: the two agree).

Usage (any machine): python benchmarks/stored_times.py REPORT.json [...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kernels import stored_over_timed  # this folder (run as a script)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", type=Path, nargs="+", help="kernels.json files")
    args = parser.parse_args()
    for path in args.reports:
        report = json.loads(path.read_text())
        for kernel, part in report.items():
            if not isinstance(part, dict) or not part.get("tune") or not part.get("rows"):
                continue
            ratios = stored_over_timed(part["tune"], part["rows"])
            if not ratios:
                continue
            each = " ".join(f"{r:.2f}" for r in ratios)
            print(f"{path} {kernel} ({report.get('objective', 'kernel')}): "
                  f"{min(ratios):.2f}-{max(ratios):.2f} | {each}")  # fmt: skip


if __name__ == "__main__":
    main()

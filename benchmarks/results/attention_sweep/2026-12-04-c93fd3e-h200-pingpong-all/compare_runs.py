"""Per-problem timing of the same entries in two runs: the geomean and median of earlier / later
time per entry over the problems both ran (a ratio below 1 means the later run was slower).

Usage (repo root): python3 benchmarks/results/attention_sweep/2026-12-04-c93fd3e-h200-pingpong-all/compare_runs.py EARLIER.json LATER.json [--long]
Reads attention_sweep.py outputs (entries: cuDNN and the candidates c0, c3, c9) and llm_kernels.py
outputs (entries: cuDNN and the tuned config); --long keeps the problems at seq >= 4096.
"""

import json
import math
import statistics
import sys
from pathlib import Path


def times(path: Path) -> dict[str, dict[str, float]]:
    """Problem (as JSON) -> entry -> ms."""
    data = json.loads(path.read_text())
    if "flash_attention" in data:  # llm_kernels.py
        return {
            json.dumps(r["problem"], sort_keys=True): {
                "cuDNN": r["baselines"]["SDPA cudnn"]["ms"],
                "tuned": r["tuned_ms"],
            }
            for r in data["flash_attention"]["rows"]
        }
    return {
        json.dumps(r["problem"], sort_keys=True): {
            "cuDNN": r["ms"]["CUDNN_ATTENTION"],
            **{c: r["ms"][c] for c in ("c0", "c3", "c9") if c in r["ms"]},
        }
        for r in data["rows"]
    }


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--long"]
    earlier, later = times(Path(args[0])), times(Path(args[1]))
    both = [p for p in later if p in earlier]
    if "--long" in sys.argv:
        both = [p for p in both if json.loads(p)["max_seqlen"] >= 4096]
    for entry in later[both[0]]:
        ratios = [earlier[p][entry] / later[p][entry] for p in both if entry in earlier[p]]
        g = math.exp(statistics.fmean(math.log(r) for r in ratios))
        print(f"{entry}: earlier/later geomean {g:.4f}, median {statistics.median(ratios):.4f}, "
              f"{len(ratios)} problems")  # fmt: skip


if __name__ == "__main__":
    main()

"""What the 25 timing samples cost in the trial batch's JSON document (repository._insert_json's
``json.dumps``), per row of a 20-row batch: distinct samples (a GPU's), 25 equal ones (the
simulated fleet's replay, noise 0), none.

    PYTHONPATH=$PWD python3 benchmarks/results/fleet_sim/2026-12-02-817f824-cpu-margin/samples_json.py
"""

from __future__ import annotations

import datetime
import json
import random
import timeit
from typing import Any


def _row(samples: list[float] | None) -> dict[str, Any]:
    return {
        "job_id": 1, "study_id": 2, "kernel_id": 3,
        "problem_key": '{"K":4096,"M":128,"N":4096,"dtype":"float16"}',
        "device_class_id": 4, "environment_id": 5,
        "config": {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4,
                   "num_stages": 3, "SPLIT_K": 1},
        "config_key": "x" * 60, "outcome": "ok", "objective": "kernel", "samples_ms": samples,
        "median_ms": 0.01234, "iqr_ms": 0.0003, "max_rel_error": 0.0, "compile_s": 0.0,
        "run_s": 0.0001, "error": None, "worker": "sim-node001/17", "host": "sim-node001",
        "reused": False, "provisional": False,
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(),
    }  # fmt: skip


def main() -> int:
    rng = random.Random(0)
    batches = {
        "25 distinct samples": [
            _row([0.0123 + rng.random() * 1e-4 for _ in range(25)]) for _ in range(20)
        ],
        "25 equal samples": [_row([0.012345678901234] * 25) for _ in range(20)],
        "no samples": [_row(None) for _ in range(20)],
    }
    n = 3000
    for name, rows in batches.items():

        def dump(rows: list[dict[str, Any]] = rows) -> str:
            return json.dumps(rows, allow_nan=False)

        t = min(timeit.repeat(dump, number=n, repeat=3))
        print(f"{name}: {t / n / 20 * 1e6:.1f} us per row")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

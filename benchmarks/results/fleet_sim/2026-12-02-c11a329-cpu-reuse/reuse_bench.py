"""A reuse, before (find_measured, then record_trial) and after (reuse_measured: one INSERT ...
SELECT): wall and client CPU per reuse over 1,000 random configs of a 20,000-row key, twice each,
one session per reuse as the ledger has it.

    python3 benchmarks/results/fleet_sim/2026-12-02-141715e-cpu-bound/reuse_bench.py pg sqlite

(from the repository root at 4b0e754; ``pg``: a fresh schema on the CI PostgreSQL)."""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from benchmarks.fleet.pg_schema import fresh_schema
from db import Database, repository
from db.states import Objective

Reuse = tuple[int, Any, float | None] | None


def before(s: Any, kid: int, cid: int, key: str) -> Reuse:
    prior = repository.find_measured(s, kid, "p", cid, key, Objective.KERNEL)
    if prior is None:
        return None
    row = repository.record_trial(
        s, kernel_id=kid, problem_key="p", device_class_id=cid, config={"a": 1},
        config_key=key, outcome=prior.outcome, environment_id=prior.environment_id,
        objective=Objective.KERNEL, reused=True, samples_ms=prior.samples_ms,
        median_ms=prior.median_ms, iqr_ms=prior.iqr_ms, max_rel_error=prior.max_rel_error,
        error=prior.error, worker=prior.worker, host=prior.host,
    )  # fmt: skip
    return row, prior.outcome, prior.median_ms


def after(s: Any, kid: int, cid: int, key: str) -> Reuse:
    found = repository.reuse_measured(
        s, kid, "p", cid, key, Objective.KERNEL, job_id=None, study_id=None, config={"a": 1}
    )  # type: ignore[arg-type]
    return None if found is None else (found.id, found.outcome, found.median_ms)


def bench(url: str, label: str) -> None:
    db = Database(url)
    db.upgrade()
    with db.session() as s:
        kid = repository.ensure_kernel(s, "matmul", "v1", "h")
        cid = repository.ensure_device_class(s, "replay:x", "nvidia", "x", "sm90", replay=True)
        rows = [
            dict(kernel_id=kid, problem_key="p", device_class_id=cid, config={"a": i},
                 config_key=f'{{"a":{i}}}', outcome="ok", samples_ms=[1.0 + i * 1e-3] * 25,
                 median_ms=1.0 + i, iqr_ms=0.1, worker="w", host="h")
            for i in range(20000)
        ]  # fmt: skip
        for i in range(0, len(rows), 1000):
            repository.record_trials(s, rows[i : i + 1000])  # type: ignore[arg-type]
    for name, fn in (("before", before), ("after", after)) * 2:
        walls = []
        cpu = time.process_time()
        for _ in range(1000):
            i = random.randrange(20000)
            t0 = time.perf_counter()
            with db.session() as s:
                found = fn(s, kid, cid, f'{{"a":{i}}}')
            walls.append(time.perf_counter() - t0)
            assert found is not None and found[2] == 1.0 + i
        per_call = (time.process_time() - cpu) / 1000
        print(f"{label} {name}: wall median {statistics.median(walls) * 1e6:.0f} us, "
              f"client CPU {per_call * 1e6:.0f} us per reuse")  # fmt: skip
    db.close()


if __name__ == "__main__":
    for kind in sys.argv[1:]:
        if kind == "pg":
            with fresh_schema("reuse") as (_schema, url):
                bench(url, kind)
        else:
            bench("sqlite:///" + tempfile.mktemp(suffix=".db"), kind)

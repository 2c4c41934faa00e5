"""CPU of ``record_trials`` on PostgreSQL, client and server: 300 batches of 20 trial rows (a fleet
driver's wait batch: 12-parameter matmul configs, 25 samples each), one session per batch, in a
fresh schema of the test server (``TUNEFLEET_TEST_PG``).

    PYTHONPATH=$PWD python3 benchmarks/results/fleet_sim/2026-12-02-3081995-cpu-server-path/record_batch.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from benchmarks.fleet.cpu_meter import stat_cpu_s  # noqa: E402
from benchmarks.fleet.pg_schema import fresh_schema  # noqa: E402
from db import Database  # noqa: E402
from db import repository as repo  # noqa: E402

BATCHES = 300
CONFIG = {
    "BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 1,
    "FUSED_REDUCE": False, "num_warps": 4, "num_stages": 3, "TMA": True, "PERSISTENT": False,
    "STREAM_K": False, "PDL": True,
}  # fmt: skip


def main() -> int:
    with fresh_schema("fleetrec") as (_schema, url):
        db = Database(url)
        db.upgrade()
        with db.session() as s:
            kernel = repo.ensure_kernel(s, "matmul", "v1", "h1")
            dc = repo.ensure_device_class(s, "replay:x", "nvidia", "x", "sm90", True, {})
        rows = [
            {
                "kernel_id": kernel,
                "problem_key": '{"M":1024,"N":6144}',
                "device_class_id": dc,
                "config": dict(CONFIG, BLOCK_M=i),
                "config_key": f"key{i}",
                "outcome": "ok",
                "samples_ms": [0.1234567 + j * 1e-5 for j in range(25)],
                "median_ms": 0.1235,
                "iqr_ms": 0.00012,
                "max_rel_error": 0.0,
                "compile_s": 0.0,
                "run_s": 0.01,
                "worker": f"node{i}/3",
                "host": f"node{i}",
            }
            for i in range(20)
        ]
        with db.session() as s:
            pid = s.execute(sa.text("SELECT pg_backend_pid()")).scalar()
        pg0 = stat_cpu_s(f"/proc/{pid}/stat") or 0.0
        t0, w0 = time.process_time(), time.perf_counter()
        for _ in range(BATCHES):
            with db.session() as s:
                repo.record_trials(s, rows)  # type: ignore[arg-type]
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        with db.session() as s:  # the pool gave every batch the same connection
            assert s.execute(sa.text("SELECT pg_backend_pid()")).scalar() == pid
        pg = (stat_cpu_s(f"/proc/{pid}/stat") or 0.0) - pg0
        db.close()
    print(
        f"postgres CPU per batch {1e3 * pg / BATCHES:.3f} ms; client CPU per batch of 20: "
        f"{1e3 * cpu / BATCHES:.3f} ms ({1e3 * cpu / (20 * BATCHES):.4f} ms per row); "
        f"wall {1e3 * wall / BATCHES:.3f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where one driver's time goes per trial: a job run by the real driver on a SimPool (no Ray, no
API), on a fresh PostgreSQL schema (or SQLite file), under cProfile.

    nice python3 benchmarks/fleet/profile_driver.py --workers 200 --overhead-s 0.05 \
        --problems 4 --trials 300 [--sqlite] [--no-profile]

Prints the trial count, the trial phase (first to last trial row), the process's CPU time per
trial (the driver and the simulated pool; PostgreSQL's is apart) and the 35 most expensive
calls by cumulative time (cProfile roughly doubles the driver's own time; the shares are what
matter). ``--no-profile``: the same run without cProfile, for the driver's own rate.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.fleet.pg_schema import fresh_schema  # noqa: E402
from benchmarks.fleet.sim_pool import ClassPlan, SimPool, SimTiming, landscape_problems  # noqa: E402
from db import Database  # noqa: E402
from orchestrator.run.driver import Driver, submit_job  # noqa: E402
from orchestrator.run.jobs import JobSpec  # noqa: E402

LANDSCAPES = sorted((ROOT / "benchmarks" / "landscapes" / "h200").glob("*.json.gz"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--overhead-s", type=float, default=0.05)
    parser.add_argument("--problems", type=int, default=4)
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--sampler", default="local", help="the job's sampler (default: local)")
    parser.add_argument("--sqlite", action="store_true", help="a SQLite file instead of PostgreSQL")
    parser.add_argument("--no-profile", action="store_true", help="time the driver only")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.sqlite:
            url = f"sqlite:///{stack.enter_context(tempfile.TemporaryDirectory())}/t.db"
        else:
            _, url = stack.enter_context(fresh_schema("prof"))
        database = Database(url)
        database.upgrade()
        pool = SimPool(
            [ClassPlan("H100", args.workers)],
            LANDSCAPES,
            nodes=4,
            slots=2,
            timing=SimTiming(overhead_s=args.overhead_s),
        )
        matmul = [p for p in LANDSCAPES if p.name.startswith("matmul_")][: args.problems]
        spec = JobSpec.from_mapping(
            {
                "kernel": "matmul",
                "problems": landscape_problems(matmul),
                "device_classes": ["replay:sim-H100"],
                "trials": args.trials,
                "sampler": args.sampler,
                "seed": 1,
            }
        )
        job = submit_job(database, spec, pool)
        profile = cProfile.Profile()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        if not args.no_profile:
            profile.enable()
        result = Driver(database, pool).run(job)
        profile.disable()
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0  # this process: the driver and the simulated pool
        with database.engine.connect() as conn:
            n, first, last = conn.execute(
                sa.text("SELECT count(*), min(created_at), max(created_at) FROM tf_trials")
            ).one()
        # SQLite hands the text back: parse it (PostgreSQL: datetimes already).
        first, last = (
            datetime.fromisoformat(v) if isinstance(v, str) else v for v in (first, last)
        )
        phase = (last - first).total_seconds() if n else 0.0
        print(
            f"{result.status.value}: {n} trials, driver wall {wall:.1f} s, trial phase "
            f"{phase:.1f} s = {n / max(phase, 1e-9):.1f} trials/s"
            f"{'' if args.no_profile else ' under cProfile'}, "
            f"{1e3 * cpu / max(n, 1):.2f} ms of CPU per trial "
            f"({'sqlite' if args.sqlite else 'postgresql'}; load {os.getloadavg()[0]:.1f})"
        )
        if not args.no_profile:
            pstats.Stats(profile).sort_stats("cumulative").print_stats(35)
        database.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""K jobs driven by K threads of one process on one shared simulated pool, as a server's scheduler
runs them (no API, no scheduler), for ``--seconds`` after ``--warmup-s`` of start-up: trials/s
and the process's CPU per trial row (the drivers and the simulated pool; PostgreSQL's apart).

    python3 benchmarks/fleet/jobs_in_process.py TREE --jobs 16 --workers-per-job 25 \
        --seconds 25 [--landscape-space]

``TREE``: the root of the tree to import (``.`` or a ``git archive`` of a commit, for A/B runs of
two trees). Each job tunes ``--problems`` of the 19 matmul landscapes (job k: landscapes
``k*problems ...``, wrapping), ``--trials`` per study, on one class of ``jobs x workers-per-job``
simulated workers with 0.5 s trials; a fresh schema on the CI PostgreSQL. ``--landscape-space``:
the studies search only the 1,176 configs the landscapes answer (``fleet_sim --landscape-space``).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(sys.argv[1]).resolve()))
del sys.argv[1]

import sqlalchemy as sa  # noqa: E402

from benchmarks.fleet.pg_schema import fresh_schema  # noqa: E402
from benchmarks.fleet.sim_pool import ClassPlan, SimPool, SimTiming, landscape_problems  # noqa: E402
from db import Database  # noqa: E402
from orchestrator.run.driver import Driver, submit_job  # noqa: E402
from orchestrator.run.jobs import JobSpec  # noqa: E402
from orchestrator.server.shared_pool import SharedPool  # noqa: E402


def _trials(database: Database) -> int:
    with database.engine.connect() as conn:
        return int(conn.scalar(sa.text("SELECT count(*) FROM tf_trials")) or 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--workers-per-job", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup-s", type=float, default=10.0)
    parser.add_argument("--problems", type=int, default=4)
    parser.add_argument("--trials", type=int, default=5000)
    parser.add_argument("--landscape-space", action="store_true")
    args = parser.parse_args()
    root = Path(sys.path[0])
    landscapes = sorted((root / "benchmarks" / "landscapes" / "h200").glob("*.json.gz"))
    matmul = [p for p in landscapes if p.name.startswith("matmul_")]
    if args.landscape_space:
        from benchmarks.fleet.sim_pool import search_only_landscapes

        search_only_landscapes(matmul)
    with fresh_schema("jobs") as (_schema, url):
        database = Database(url)
        database.upgrade()
        workers = args.workers_per_job * args.jobs
        pool = SimPool([ClassPlan("H100", workers)], landscapes, nodes=4, slots=2,
                       timing=SimTiming(overhead_s=0.5))  # fmt: skip
        shared = SharedPool(pool)
        stop = threading.Event()
        threads = []
        for k in range(args.jobs):
            picked = [matmul[(k * args.problems + j) % len(matmul)] for j in range(args.problems)]
            spec = JobSpec.from_mapping(
                {"kernel": "matmul", "problems": landscape_problems(picked),
                 "device_classes": ["replay:sim-H100"], "trials": args.trials,
                 "sampler": "local", "seed": k, "team": f"t{k % 4}"}
            )  # fmt: skip
            job = submit_job(database, spec, pool)
            view = shared.view(job, f"t{k % 4}")
            driver = Driver(database, view, stop=stop.is_set)
            threads.append(threading.Thread(target=driver.run, args=(job,), name=f"job-{job}"))
        for t in threads:
            t.start()
        time.sleep(args.warmup_s)
        n0 = _trials(database)
        cpu0, t0 = time.process_time(), time.perf_counter()
        time.sleep(args.seconds)
        n = _trials(database) - n0
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        stop.set()
        for t in threads:
            t.join(60)
        print(f"jobs {args.jobs}: {n / wall:.1f} trials/s, {1e3 * cpu / max(n, 1):.3f} ms CPU "
              f"per trial, {cpu / wall:.2f} cores")  # fmt: skip
        database.close()


if __name__ == "__main__":
    main()

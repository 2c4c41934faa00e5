"""``tunefleet tune --from-capture`` without Ray: each capture job driven in this process.

The same jobs (:func:`orchestrator.app.capture_jobs.capture_jobs`), driver and trial runner as the
command, on an in-process pool (:class:`orchestrator.run.local_pool.LocalPool`) with one worker of
``--device`` (auto: this machine's GPU; interpreter). The trial runner's child process still
bounds each compile and run by the timeouts. Prints one JSON summary per job, one a line.

    python3 tune_local.py CAPTURE_DIR sqlite:///tf.db --widen --trials 10 --minutes 0.8
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from db import Database
from orchestrator.app.capture_jobs import capture_jobs
from orchestrator.app.jobs import job_summary
from orchestrator.run.driver import Driver, submit_job
from orchestrator.run.local_pool import LocalPool
from orchestrator.run.worker import PoolOptions, WorkerPlan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture")
    parser.add_argument("db")
    parser.add_argument("--widen", action="store_true")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--minutes", type=float, default=1.0, help="wall budget per job")
    parser.add_argument("--compile-timeout", type=float, default=20.0)
    parser.add_argument("--device", default="auto", choices=("auto", "interpreter"))
    args = parser.parse_args()
    overrides: dict[str, Any] = {
        "trials": args.trials,
        "minutes": args.minutes,
        "compile_timeout_s": args.compile_timeout,
        "devices": [args.device],
    }
    database = Database(args.db)
    database.ensure_schema()
    for cj in capture_jobs(args.capture, args.widen, overrides):
        # orchestrator.app.running.pool_options's settings, without its import of orchestrator.run.dispatch (Ray).
        options = PoolOptions(
            compile_timeout_s=cj.job.compile_timeout_s, run_timeout_s=cj.job.run_timeout_s
        )
        pool = LocalPool([WorkerPlan(args.device)], options)
        try:
            result = Driver(database, pool, retime_rounds=1, poll_s=0.0).run(
                submit_job(database, cj.job, pool)
            )
        finally:
            pool.shutdown()
        summary = job_summary(database, result.job_id, (cj.ref,)).summary
        print(json.dumps({"kernel": cj.ref, "job": result.job_id, **summary}, default=str))
        print(f"{cj.spec.name}: job {result.job_id} {result.status.value}", file=sys.stderr)


if __name__ == "__main__":
    main()

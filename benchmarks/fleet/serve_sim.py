"""One ``tunefleet serve`` process of the simulated fleet: the real API (``create_app``) and the real
scheduler (claims, leases, one driver thread per job, the database writes), with the scheduler's
Ray pools replaced by :class:`benchmarks.fleet.sim_pool.SimPool` (one per simulated class).

    python3 benchmarks/fleet/serve_sim.py --db URL --port 0 --workers 500 --classes H100,A100 \
        --nodes 10 --owner sim-a --stats stats.json

Only the pool factory differs from ``tunefleet serve``: ``orchestrator.run.dispatch``'s
``ensure_ray`` (no Ray), ``plans_for`` (one plan per simulated class) and ``WorkerPool`` (a
SimPool) are replaced in this process before the scheduler starts. SIGUSR1 makes it write
``--stats``; SIGTERM stops the scheduler and the server as ``tunefleet serve``'s handler does. The
stats: each claim's duration, each class's busy share from its first to its last trial, the
trials each pool ran, and the process's CPU seconds by thread role (:func:`thread_role`) sampled
every 0.5 s (``cpu``: ``[monotonic time, {role: cumulative s}]``).
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.fleet.cpu_meter import CpuMeter, threads_by_role  # noqa: E402
from benchmarks.fleet.sim_pool import (  # noqa: E402
    ClassPlan,
    SimPool,
    SimTiming,
    class_plans,
    search_only_landscapes,
)
from db import Database, repository  # noqa: E402
from orchestrator.run import dispatch  # noqa: E402
from orchestrator.run.worker import PoolOptions, WorkerPlan  # noqa: E402

LANDSCAPES = sorted((ROOT / "benchmarks" / "landscapes" / "h200").glob("*.json.gz"))


def thread_role(name: str) -> str:
    """What a thread of this process does, from its name: ``drivers`` (a job's thread),
    ``api`` (uvicorn runs in the main thread), ``scheduler`` (claims), ``leases``, ``other``."""
    if name.startswith("job-"):
        return "drivers"
    if name.startswith("lease-"):
        return "leases"
    return {"MainThread": "api", "scheduler": "scheduler"}.get(name, "other")


class Fleet:
    """The pool factory the scheduler calls instead of Ray's, and what it measured."""

    def __init__(
        self, plans: Sequence[ClassPlan], nodes: int, slots: int, timing: SimTiming
    ) -> None:
        self.plans = {p.label: p for p in plans}
        self.nodes, self.slots, self.timing = nodes, slots, timing
        self.pools: dict[str, SimPool] = {}
        self.claims_ms: list[float] = []
        self._lock = threading.Lock()

    def plans_for(self, sources: Sequence[Any], options: PoolOptions) -> list[WorkerPlan]:
        # One plan per class: the scheduler groups plans by (backend, paths, resources).
        return [WorkerPlan("replay", replay_paths=(f"sim:{label}",)) for label in self.plans]

    def pool(self, plans: Sequence[WorkerPlan], options: PoolOptions | None = None) -> SimPool:
        (label,) = {p.replay_paths[0].removeprefix("sim:") for p in plans}
        pool = SimPool(
            [self.plans[label]],
            LANDSCAPES,
            nodes=self.nodes,
            slots=(options.in_flight if options and options.in_flight else self.slots),
            timing=self.timing,
            name=label,
        )
        with self._lock:
            self.pools[f"{label}#{len(self.pools)}"] = pool
        return pool

    def timed_claim(self, claim: Any) -> Any:
        def claim_next_job(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return claim(*args, **kwargs)
            finally:
                with self._lock:
                    self.claims_ms.append((time.perf_counter() - t0) * 1e3)

        return claim_next_job

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"claims_ms": self.claims_ms, "pools": {}}
        for name, pool in self.pools.items():
            out["pools"][name] = pool.summary()
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path, required=True, help="where to write the port")
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--classes", required=True, help="comma-separated class labels")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--slots", type=int, default=2, help="trials queued per worker")
    parser.add_argument("--overhead-s", type=float, default=0.5)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--poll-s", type=float, default=0.5)
    parser.add_argument("--jobs-per-class", type=int, default=8, help="jobs sharing a class")
    parser.add_argument("--max-jobs", type=int, default=None, help="jobs a server runs at once")
    parser.add_argument("--stats", type=Path, required=True)
    parser.add_argument(
        "--landscape-space", action="store_true", help="search only the configs replay answers"
    )
    args = parser.parse_args(argv)
    if args.landscape_space:
        search_only_landscapes([p for p in LANDSCAPES if p.name.startswith("matmul_")])

    fleet = Fleet(
        class_plans(args.workers, args.classes.split(",")),
        args.nodes,
        args.slots,
        SimTiming(overhead_s=args.overhead_s, scale=args.scale),
    )

    def no_ray(address: str | None = None, *_: int | None) -> bool:
        return False

    dispatch.ensure_ray = no_ray  # type: ignore[assignment]
    dispatch.plans_for = fleet.plans_for
    dispatch.WorkerPool = fleet.pool  # type: ignore[misc, assignment]
    repository.claim_next_job = fleet.timed_claim(repository.claim_next_job)

    import uvicorn

    from orchestrator.commands.serve import _stop_gracefully
    from orchestrator.server.app import create_app
    from orchestrator.server.scheduler import Scheduler

    database = Database(args.db)
    scheduler = Scheduler(
        database,
        owner=args.owner,
        poll_s=args.poll_s,
        jobs_per_class=args.jobs_per_class,
        max_jobs=args.max_jobs,
    )
    app = create_app(database, scheduler=scheduler)
    sock = socket.socket()
    sock.bind(("127.0.0.1", args.port))
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    )

    _stop_gracefully(server, scheduler)  # SIGTERM as `tunefleet serve` takes it
    # SIGUSR1: write the stats now (the run's window ends; the stop may take long).
    meter = CpuMeter(lambda: threads_by_role(thread_role))

    def write_stats(*_: Any) -> None:
        args.stats.write_text(json.dumps({**fleet.stats(), "cpu": meter.series()}))

    signal.signal(signal.SIGUSR1, write_stats)
    meter.start()
    scheduler.start()
    args.port_file.write_text(str(sock.getsockname()[1]))
    try:
        server.run(sockets=[sock])
    finally:
        database.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

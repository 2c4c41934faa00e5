"""A driver process for the lease fault scenarios: ``python -m tests.faults._lease_driver URL JOB
LANDSCAPES TTL_S DELAY_S`` takes job JOB's lease (TTL_S seconds) under an owner id of its own and
drives the job on an in-process pool of replay workers (LANDSCAPES: comma-separated files, each
trial DELAY_S long). Prints ``id <owner id>`` and ``clock <its host clock, ISO>`` first, then
``owner <id> <epoch>`` once it holds the lease; exits 0 when the job ended (``status <status>``),
3 when its lease was taken over (``lease lost: ...``), 4 when another owner's lease is live
(``leased: ...``)."""

from __future__ import annotations

import sys

from db import Database, LeaseLost
from db.models import utcnow
from orchestrator.app.running import drive
from orchestrator.errors import JobLeased
from orchestrator.run.lease import LeaseKeeper, default_owner
from orchestrator.run.local_pool import LocalPool
from orchestrator.run.worker import PoolOptions, WorkerPlan


def main(url: str, job_id: int, landscapes: str, ttl_s: float, delay_s: float) -> int:
    database = Database(url)
    pool = LocalPool(
        [WorkerPlan("replay", tuple(landscapes.split(",")))], PoolOptions(replay_delay_s=delay_s)
    )
    owner = default_owner()
    print("id", owner, flush=True)
    print("clock", utcnow().isoformat(), flush=True)
    try:
        with LeaseKeeper(database, job_id, owner, ttl_s) as keeper:
            print("owner", keeper.owner, keeper.lease.epoch, flush=True)
            result = drive(database, pool, job_id, keeper)
        print("status", result.status.value, flush=True)
        return 0
    except LeaseLost as exc:
        print("lease lost:", exc, flush=True)
        return 3
    except JobLeased as exc:
        print("leased:", exc, flush=True)
        return 4
    finally:
        pool.shutdown()
        database.close()


if __name__ == "__main__":
    url, job, paths, ttl, delay = sys.argv[1:6]
    sys.exit(main(url, int(job), paths, float(ttl), float(delay)))

"""Scheduler.stop with drivers that do not stop at once (real threads, no Ray): every driver is
told at once and all are waited for against one deadline, not one timeout each. Scheduler.health
names what keeps a scheduler from running jobs."""

from __future__ import annotations

import logging
import threading
import time
from typing import cast

import pytest

from db import Database, repository
from orchestrator.run.dispatch import WorkerPool
from orchestrator.run.lease import LeaseKeeper
from orchestrator.server.scheduler import Scheduler, _Group, _Job


def driver(stopping: threading.Event, after_stop_s: float) -> threading.Thread:
    """A driver thread that ends ``after_stop_s`` after the scheduler's stop is seen."""

    def run() -> None:
        stopping.wait(5)
        time.sleep(after_stop_s)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_stop_waits_for_every_driver_together_against_one_deadline(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = Scheduler(database, owner="stop-test")
    stopping = scheduler._stopping
    lags = {1: 0.05, 2: 1.5, 3: 1.5, 4: 0.1}  # jobs 2 and 3 outlast the timeout
    for job_id, lag in lags.items():
        keeper = LeaseKeeper(database, job_id, "stop-test", 30.0)  # never entered
        scheduler._claimed[job_id] = _Job(job_id, keeper, thread=driver(stopping, lag))
    caplog.set_level(logging.WARNING, logger="tunefleet.scheduler")
    t0 = time.monotonic()
    scheduler.stop(timeout_s=0.4)
    took = time.monotonic() - t0
    # One deadline: 0.4 s in all (one each would be 0.8 s for the two slow ones).
    assert 0.35 <= took < 0.7, took
    warned = sorted(r.getMessage() for r in caplog.records)
    assert warned == [
        "job 2: its driver did not stop within 0.4 s",
        "job 3: its driver did not stop within 0.4 s",
    ]


def test_stop_releases_a_claimed_job_that_never_started(database: Database) -> None:
    # A job claimed while its class was busy waits without a thread; stop lets it go (its lease
    # released, back in the queue for another server) and returns: it deadlocked on its own lock.
    with database.session() as s:
        kernel = repository.ensure_kernel(s, "matmul", "v1", "space1")
        job_id = repository.create_job(s, kernel, {"kernel": "matmul"}, "team-a")
        assert repository.claim_next_job(s, "stop-test", 30.0) == job_id
    scheduler = Scheduler(database, owner="stop-test")
    assert scheduler._take(job_id)
    stopper = threading.Thread(target=scheduler.stop, kwargs={"timeout_s": 1.0}, daemon=True)
    stopper.start()
    stopper.join(10)
    assert not stopper.is_alive()
    with database.session(readonly=True) as s:
        record = repository.get_job(s, job_id)
    assert record.lease_owner is None and scheduler._claimed == {}


class _Pool:
    """A pool that lost its only worker of class ``cpu``."""

    def health(self) -> list[str]:
        return ["device class cpu has no live worker (a replacement is starting)"]


def test_health_names_dead_workers_a_dead_thread_and_classes_without_workers(
    database: Database,
) -> None:
    scheduler = Scheduler(database, owner="health-test")
    assert scheduler.health() == []
    scheduler.error = "cannot read the replay file x.json"
    assert scheduler.health() == ["the scheduler's workers did not start (the server log has why)"]
    scheduler.error = None
    scheduler._thread = threading.Thread(target=lambda: None)
    scheduler._thread.start()
    scheduler._thread.join()
    scheduler._groups.append(_Group("interpreter", [], {"cpu"}, cast(WorkerPool, _Pool())))
    assert scheduler.health() == [
        "the scheduler's claiming thread ended; restart the server",
        "device class cpu has no live worker (a replacement is starting)",
    ]

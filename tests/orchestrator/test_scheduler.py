"""The scheduler on a real local Ray with replay workers (two device classes): queued jobs run
exactly once, by priority, classes at once and one class's pool shared by its jobs (on SQLite and
PostgreSQL); a cancel reaches a running job; a stopped scheduler's job is finished by the next one with no trial lost or measured
twice; what a scheduler owned it resumes at once; it never imports a kernel module it was not
allowed; a second scheduler on one SQLite file refuses to start."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
import sqlalchemy as sa

from db import Database, JobStatus, repository
from db.models import Trial
from orchestrator.app.jobs import cancel_job, submit_job
from orchestrator.errors import OrchestratorError, SchedulerConflict
from orchestrator.run.dispatch import PoolOptions, ensure_ray
from orchestrator.run.jobs import DeviceSource, JobSpec
from orchestrator.server.scheduler import Scheduler
from tests.orchestrator.conftest import A100, H200

SMALL = "M=256,N=256,K=256,dtype=float16"
SMALL_M = 256


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    ensure_ray(None, 2)
    yield
    ray.shutdown()


def replay(landscapes: dict[str, list[Path]], device: str) -> DeviceSource:
    """``device``'s landscape of SMALL, the one problem of these jobs (a replay worker loads every
    file it is given, in each pool and each re-timing)."""
    (small,) = [p for p in landscapes[device] if p.name.endswith(f"-M{SMALL_M}.json.gz")]
    return DeviceSource.parse(f"replay:{small}")


def submit(database: Database, device: str, trials: int, priority: int = 0) -> int:
    spec = JobSpec.from_mapping(
        {
            "kernel": "matmul",
            "problems": [SMALL],
            "device_classes": [f"replay:{device}"],
            "trials": trials,
        }
    )
    return submit_job(database, spec, priority=priority)


def job(database: Database, job_id: int) -> repository.JobRecord:
    with database.session(readonly=True) as s:
        return repository.get_job(s, job_id)


def trials(database: Database, job_id: int) -> list[Trial]:
    with database.session(readonly=True) as s:
        found = list(s.scalars(sa.select(Trial).where(Trial.job_id == job_id).order_by(Trial.id)))
        s.expunge_all()
    return found


def until(check: object, timeout_s: float = 180.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def assert_once(database: Database, job_id: int, budget: int) -> None:
    """Each config has at most one final row, and the final rows are the budget."""
    final = [t for t in trials(database, job_id) if t.outcome.value != "infra"]
    assert len(final) == budget
    assert max(Counter(t.config_key for t in final).values()) == 1


def test_queued_jobs_run_once_by_priority_sharing_classes(
    db: Database, landscapes: dict[str, list[Path]]
) -> None:
    database = db  # SQLite and PostgreSQL
    later = submit(database, H200, 6)
    other = submit(database, A100, 6)
    first = submit(database, H200, 6, priority=5)
    scheduler = Scheduler(
        database,
        devices=(replay(landscapes, H200), replay(landscapes, A100)),
        pool_options=PoolOptions(replay_delay_s=0.1),
        poll_s=0.2,
    )
    scheduler.start()
    try:
        until(lambda: scheduler.status()["running"], what="a running job")
        classes = {c.key: c for c in scheduler.device_classes()}
        assert set(classes) == {f"replay:{H200}", f"replay:{A100}"}
        assert all(c.workers == 1 and c.busy + c.idle == 1 for c in classes.values())
        until(
            lambda: all(job(database, j).status is JobStatus.DONE for j in (later, other, first)),
            what="three jobs done",
        )
        assert scheduler.status()["running"] == [] and scheduler.status()["queued"] == 0
    finally:
        scheduler.stop(60)
    a, b, c = (job(database, j) for j in (later, other, first))
    assert all(r.lease_owner is None and r.started_at and r.finished_at for r in (a, b, c))
    assert a.started_at < c.finished_at  # type: ignore[operator]  # one class: shared at once
    assert b.started_at < c.finished_at  # type: ignore[operator]  # two classes: at once
    for j in (later, other, first):
        assert_once(database, j, 6)


def test_a_cancel_reaches_the_running_job_through_the_schedulers_one_read(
    database: Database, landscapes: dict[str, list[Path]]
) -> None:
    job_id = submit(database, H200, 200)
    scheduler = Scheduler(
        database,
        devices=(replay(landscapes, H200),),
        pool_options=PoolOptions(replay_delay_s=0.2),
        poll_s=0.2,
    )
    scheduler.start()
    try:
        until(lambda: len(trials(database, job_id)) >= 2, what="2 trial rows")
        cancel_job(database, job_id)
        until(lambda: job(database, job_id).status is JobStatus.CANCELLED, what="cancelled")
    finally:
        scheduler.stop(60)
    assert len(trials(database, job_id)) < 200


def test_max_jobs_holds_the_rest_in_the_queue(
    database: Database, landscapes: dict[str, list[Path]]
) -> None:
    # Two jobs on two idle classes would run at once; with max_jobs=1 the second waits.
    first, second = submit(database, H200, 4), submit(database, A100, 4)
    scheduler = Scheduler(
        database,
        devices=(replay(landscapes, H200), replay(landscapes, A100)),
        pool_options=PoolOptions(replay_delay_s=0.1),
        poll_s=0.2,
        max_jobs=1,
    )
    scheduler.start()
    try:
        until(lambda: scheduler.status()["running"], what="a running job")
        assert len(scheduler.status()["running"]) == 1
        assert job(database, second).status is JobStatus.QUEUED
        until(
            lambda: all(job(database, j).status is JobStatus.DONE for j in (first, second)),
            what="both jobs done",
        )
    finally:
        scheduler.stop(60)
    a, b = job(database, first), job(database, second)
    assert a.finished_at is not None and b.started_at is not None
    assert b.started_at >= a.finished_at
    with pytest.raises(OrchestratorError, match="max_jobs"):
        Scheduler(database, devices=(replay(landscapes, H200),), max_jobs=0)


def test_a_stopped_scheduler_leaves_the_job_to_the_next_one(
    db_url: str, landscapes: dict[str, list[Path]]
) -> None:
    database = Database(db_url)
    database.ensure_schema()
    job_id = submit(database, H200, 40)
    devices = (replay(landscapes, H200),)
    slow = PoolOptions(replay_delay_s=0.2)
    first = Scheduler(database, devices=devices, pool_options=slow, poll_s=0.2)
    first.start()
    try:
        until(lambda: len(trials(database, job_id)) >= 8, what="8 trial rows")
    finally:
        first.stop(60)
    before = trials(database, job_id)
    stopped = job(database, job_id)
    assert stopped.status is JobStatus.QUEUED and stopped.lease_owner is None
    assert len(before) < 40
    second = Scheduler(database, devices=devices, poll_s=0.2)
    second.start()
    try:
        until(lambda: job(database, job_id).status is JobStatus.DONE, what="the job done")
    finally:
        second.stop(60)
    after = trials(database, job_id)
    assert {t.id for t in before} <= {t.id for t in after}
    assert_once(database, job_id, 40)


def test_resumes_what_it_owned_leaves_others_leases_imports_nothing_unallowed(
    database: Database, landscapes: dict[str, list[Path]]
) -> None:
    mine, theirs = submit(database, H200, 4), submit(database, H200, 4)
    with database.session() as s:
        assert repository.acquire_lease(s, mine, "server-a", 120.0)
        assert repository.acquire_lease(s, theirs, "server-b", 120.0)
        # A row written straight to the database, naming code the server never allowed.
        kernel_id = repository.ensure_kernel(s, "planted_module:SPEC", "v1", "h1")
        planted = repository.create_job(
            s, kernel_id, {"kernel": "planted_module:SPEC", "problems": [{"n": 1}]}, "red"
        )
    scheduler = Scheduler(
        database, devices=(replay(landscapes, H200),), owner="server-a", poll_s=0.2
    )
    scheduler.start()
    try:
        until(lambda: job(database, mine).status is JobStatus.DONE, what="its own job done")
        assert job(database, theirs).status is JobStatus.QUEUED
        assert job(database, theirs).lease_owner == "server-b"
        until(lambda: job(database, planted).status is JobStatus.FAILED, what="planted job failed")
        assert "kernel 'planted_module:SPEC' is not registered" in (
            job(database, planted).error or ""
        )
    finally:
        scheduler.stop(60)


def test_a_second_scheduler_on_one_sqlite_file_refuses(
    db_url: str, landscapes: dict[str, list[Path]]
) -> None:
    database = Database(db_url)
    database.ensure_schema()
    devices = (replay(landscapes, H200),)
    one = Scheduler(database, devices=devices)
    one.start()
    try:
        with pytest.raises(SchedulerConflict, match="already serves the SQLite file"):
            Scheduler(Database(db_url), devices=devices).start()
    finally:
        one.stop(60)
    again = Scheduler(database, devices=devices)  # the lock went with the first one
    again.start()
    again.stop(60)

"""Faults around leases and workers, with real processes on both backends: a driver frozen
(SIGSTOP) past its lease while another takes the job over writes nothing when it wakes; two
drivers of one host have distinct owner ids and one runs the job; a host clock off by an hour
changes no lease (their times are the database's clock); a killed worker process is replaced
and its job and the next one end done; a job with no study to run is never ``done``; a config
lost with the only worker gets its final row on resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import ray

from db import Database, JobStatus, TrialOutcome, repository
from db.models import CLOCK_OFFSET_ENV, utcnow
from orchestrator.app import jobs
from orchestrator.app.running import drive
from orchestrator.errors import NoWorkersError
from orchestrator.run.dispatch import WorkerPool, ensure_ray
from orchestrator.run.driver import Driver, submit_job
from orchestrator.run.healing import Healer
from orchestrator.run.jobs import JobSpec
from orchestrator.run.lease import LeaseKeeper, default_owner
from orchestrator.run.local_pool import LocalPool
from orchestrator.run.pool import Done, WorkerInfo
from orchestrator.run.worker import PoolOptions, WorkerPlan
from orchestrator.server.scheduler import Scheduler
from tests.faults.checker import assert_held
from tests.faults.conftest import H200, MATMUL_SMALL, FaultPool
from workers.measurement import Measurement, Outcome

ROOT = Path(__file__).resolve().parents[2]
#: The first driver's lease: short, so a freeze outlasts it within a fast test.
TTL_S = 1.0
DELAY_S = 0.1


def spec(trials: int) -> JobSpec:
    return JobSpec.from_mapping({"kernel": "matmul", "problems": [MATMUL_SMALL], "trials": trials})


def paths(landscapes: dict[str, list[Path]]) -> tuple[str, ...]:
    """The H200 landscape of MATMUL_SMALL, the one problem of these jobs (a replay worker loads
    every file it is given, in each pool and each re-timing)."""
    (small,) = [p for p in landscapes[H200] if f"-M{MATMUL_SMALL['M']}." in p.name]
    return (str(small),)


def driver(
    url: str,
    job_id: int,
    landscapes: dict[str, list[Path]],
    *,
    ttl_s: float = TTL_S,
    delay_s: float = DELAY_S,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """A driver process (tests/faults/_lease_driver.py) on job ``job_id``."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.faults._lease_driver", url, str(job_id),
         ",".join(paths(landscapes)), str(ttl_s), str(delay_s)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def rows(database: Database, job_id: int) -> list[repository.TrialRecord]:
    with database.session(readonly=True) as s:
        return [
            t
            for st in repository.studies_for_job(s, job_id)
            for t in repository.trials_for_study(s, st.id)
        ]


def job(database: Database, job_id: int) -> repository.JobRecord:
    with database.session(readonly=True) as s:
        return repository.get_job(s, job_id)


def until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def printed(out: str, key: str) -> str:
    """The value of the driver's ``key ...`` line."""
    return next(line.split(" ", 1)[1] for line in out.splitlines() if line.startswith(key + " "))


@pytest.fixture
def migrated(empty_url: str) -> Iterator[tuple[str, Database]]:
    database = Database(empty_url)
    database.upgrade()
    yield empty_url, database
    database.close()


def test_a_frozen_driver_writes_nothing_once_its_job_is_taken_over(
    migrated: tuple[str, Database], landscapes: dict[str, list[Path]]
) -> None:
    """Issue 45 item 1: driver A is frozen (SIGSTOP) past its 1 s lease; B takes the job over
    (epoch raised) and runs it; A, woken (SIGCONT) while B runs, finds its lease gone at its
    next write, which is discarded, and exits: no row of A's after the takeover, the job ends
    ``done`` by B with exactly the budget of final rows, none twice."""
    url, database = migrated
    budget = 16
    job_id = jobs.submit_job(database, spec(budget))
    a = driver(url, job_id, landscapes)
    b_pool = LocalPool([WorkerPlan("replay", paths(landscapes))], PoolOptions(replay_delay_s=0.1))
    taken: dict[str, object] = {}

    def by_b(done: Done, n: int) -> Done:
        done.measurement.worker = "B"  # B's rows, told from A's
        return done

    def take_over() -> None:
        with LeaseKeeper(database, job_id, default_owner(), ttl_s=10.0) as keeper:
            taken["epoch"], taken["last"] = (
                keeper.lease.epoch,
                max(t.id for t in rows(database, job_id)),
            )
            taken["status"] = drive(database, FaultPool(b_pool, by_b), job_id, keeper).status

    b = threading.Thread(target=take_over, daemon=True)
    try:
        until(lambda: len(rows(database, job_id)) >= 3, 120, "three rows of driver A")
        os.kill(a.pid, signal.SIGSTOP)
        time.sleep(TTL_S * 1.5)  # A's lease expires on the database's clock
        b.start()
        until(lambda: sum(t.worker == "B" for t in rows(database, job_id)) >= 2, 60, "B's rows")
        os.kill(a.pid, signal.SIGCONT)
        out, err = a.communicate(timeout=60)
        b.join(120)
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
            a.wait()
        b_pool.shutdown()
    assert a.returncode == 3, err[-2000:]
    assert "lease lost" in out and "Traceback" not in err
    assert taken["status"] is JobStatus.DONE
    first = int(printed(out, "owner").split()[1])
    assert taken["epoch"] == first + 1
    late = [t.id for t in rows(database, job_id) if t.worker != "B" and t.id > taken["last"]]  # type: ignore[operator]
    assert late == [], "the frozen driver wrote after the takeover"
    record = job(database, job_id)
    assert record.status is JobStatus.DONE and record.error is None
    report = assert_held(database, [job_id])
    assert report.final == budget


def test_two_drivers_of_one_host_have_distinct_owners_and_one_runs_the_job(
    migrated: tuple[str, Database], landscapes: dict[str, list[Path]]
) -> None:
    """Issue 45 item 2: owner ids are unique per process (host, pid, random), for CLI drivers
    and servers alike: a second driver on the same host is refused the first one's live lease
    instead of sharing it."""
    url, database = migrated
    budget = 12
    job_id = jobs.submit_job(database, spec(budget))
    first = driver(url, job_id, landscapes, ttl_s=10.0, delay_s=0.3)
    until(lambda: job(database, job_id).lease_owner is not None, 120, "the first lease")
    second = driver(url, job_id, landscapes, ttl_s=10.0)
    out2, err2 = second.communicate(timeout=120)
    out1, err1 = first.communicate(timeout=120)
    assert (first.returncode, second.returncode) == (0, 4), (err1[-1000:], err2[-1000:])
    ids = [printed(out1, "id"), printed(out2, "id")]
    assert ids[0] != ids[1] and ids[0].split(":")[0] == ids[1].split(":")[0]  # one host
    assert "is being run by " + ids[0] in out2
    servers = {Scheduler(database).owner for _ in range(2)}
    assert len(servers) == 2
    assert job(database, job_id).status is JobStatus.DONE
    assert assert_held(database, [job_id]).final == budget


def test_a_host_clock_off_by_an_hour_changes_no_lease(
    migrated: tuple[str, Database], landscapes: dict[str, list[Path]]
) -> None:
    """Issue 45 item 2: leases are stamped and compared on the database's clock. A driver whose
    host clock is an hour ahead (TUNEFLEET_CLOCK_OFFSET_S, read by db.models.utcnow) is refused a
    live lease; one whose clock is an hour behind takes an expired lease over at once."""
    url, database = migrated
    job_id = jobs.submit_job(database, spec(6))
    with LeaseKeeper(database, job_id, default_owner(), ttl_s=30.0) as keeper:
        ahead = driver(url, job_id, landscapes, env={CLOCK_OFFSET_ENV: "3600"})
        out, err = ahead.communicate(timeout=120)
        assert ahead.returncode == 4, err[-2000:]
        assert keeper.owner in out and not keeper.lost()
    clock = datetime.fromisoformat(printed(out, "clock"))
    assert abs(clock - utcnow() - timedelta(hours=1)) < timedelta(minutes=5)  # the seam took
    with database.session() as s:
        assert repository.acquire_lease(s, job_id, "gone:1:x", 0.5) is not None
    time.sleep(0.7)  # expired on the database's clock, never renewed: its owner died
    behind = driver(url, job_id, landscapes, env={CLOCK_OFFSET_ENV: "-3600"})
    out, err = behind.communicate(timeout=120)
    assert behind.returncode == 0 and "status done" in out, err[-2000:]
    assert_held(database, [job_id])


def lost(done: Done) -> Done:
    """``done`` as if its worker had been lost with it in flight."""
    m = Measurement(Outcome.INFRA, error="worker lost: the actor died")
    m.worker, m.host = done.measurement.worker, done.measurement.host
    return Done(done.request, done.tag, m, done.worker, lost=True)


class LosesItsOnlyWorker(FaultPool):
    """The third result comes back lost, and the class has no worker from then on."""

    def __init__(self, inner: LocalPool) -> None:
        super().__init__(inner, lambda d, n: lost(d) if n == 3 else d)

    def workers(self, class_key: str | None = None) -> list[WorkerInfo]:
        return [] if self.seen >= 3 else super().workers(class_key)

    def classes(self) -> dict[str, WorkerInfo]:
        return {} if self.seen >= 3 else super().classes()


def test_a_config_lost_with_the_only_worker_gets_its_final_row_on_resume(
    db: Database, landscapes: dict[str, list[Path]]
) -> None:
    """Issue 45 item 8: the job fails when its only worker is lost (an ``infra`` row for the
    config in flight); ``resume`` measures that config first, so every config of the done job
    ends in exactly one final row."""
    local = LocalPool([WorkerPlan("replay", paths(landscapes))])
    try:
        pool = LosesItsOnlyWorker(local)
        job_id = submit_job(db, spec(6), pool)
        with pytest.raises(NoWorkersError, match="every worker"):
            Driver(db, pool, retime_rounds=1, poll_s=0.0).run(job_id)
    finally:
        local.shutdown()  # with the trials it still had queued, as a failed CLI job's pool
    assert job(db, job_id).status is JobStatus.FAILED
    (infra,) = [t.config_key for t in rows(db, job_id) if t.outcome is TrialOutcome.INFRA]
    again = LocalPool([WorkerPlan("replay", paths(landscapes))])
    try:
        result = Driver(db, again, retime_rounds=1, poll_s=0.0).run(job_id)
    finally:
        again.shutdown()
    assert result.status is JobStatus.DONE
    final = [t for t in rows(db, job_id) if t.config_key == infra and not t.provisional]
    assert [t.outcome is TrialOutcome.INFRA for t in final] == [True, False]
    assert_held(db, [job_id])


class NoWorkerLeft(FaultPool):
    """A pool whose every worker is gone."""

    def workers(self, class_key: str | None = None) -> list[WorkerInfo]:
        return []

    def classes(self) -> dict[str, WorkerInfo]:
        return {}


def test_a_job_with_no_study_to_run_fails_with_its_reason_never_done(
    db: Database, landscapes: dict[str, list[Path]]
) -> None:
    """Issue 45 item 3: a job for every class on a pool with no live worker would plan zero
    studies: its driver raises why, and the job is not ``done``; under a scheduler it is
    failed with that reason (Scheduler._fail, fenced on its lease)."""
    local = LocalPool([WorkerPlan("replay", paths(landscapes))])
    try:
        job_id = submit_job(db, spec(4), local)
        with (
            LeaseKeeper(db, job_id, default_owner(), 10.0) as keeper,
            pytest.raises(NoWorkersError, match="would run no study: the pool has no live"),
        ):
            drive(db, NoWorkerLeft(local, lambda d, n: d), job_id, keeper)
    finally:
        local.shutdown()
    assert job(db, job_id).status is JobStatus.QUEUED
    assert rows(db, job_id) == []


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    started = ensure_ray(None, 2)
    yield
    if started:
        ray.shutdown()


def test_a_killed_worker_process_is_replaced_and_no_job_is_falsely_done(
    local_ray: None, db: Database, landscapes: dict[str, list[Path]]
) -> None:
    """Issue 45 item 3: the only worker actor's process is SIGKILLed mid-job: its trial in
    flight is recorded ``infra`` and measured again on a fresh actor (the pool waits for it), the
    job ends done, and the next job on the pool runs its trials; the pool reports no class
    without workers."""
    pool = WorkerPool([WorkerPlan("replay", paths(landscapes))], PoolOptions(replay_delay_s=0.05))
    try:
        (first,) = pool.workers()

        def kill(done: Done, n: int) -> Done:
            if n == 3:
                os.kill(first.pid, signal.SIGKILL)
            return done

        faulty = FaultPool(pool, kill)
        one = Driver(db, faulty, retime_rounds=1, poll_s=0.0).run(submit_job(db, spec(8), faulty))
        (second,) = pool.workers()
        assert second.pid != first.pid and pool.health() == []
        two = Driver(db, pool, retime_rounds=1, poll_s=0.0).run(submit_job(db, spec(8), pool))
    finally:
        pool.shutdown()
    assert (one.status, two.status) == (JobStatus.DONE, JobStatus.DONE)
    assert any(t.outcome is TrialOutcome.INFRA for t in rows(db, one.job_id))
    assert assert_held(db, [one.job_id, two.job_id]).final == 16


def test_replacements_back_off_and_stop_at_their_cap_and_are_reported() -> None:
    """A class whose replacement cannot start: tried again after a doubling backoff, at most
    ``max_starts`` times per window; the pool's health names the class and why."""
    starts: list[WorkerPlan] = []

    def start(plan: WorkerPlan) -> object:
        starts.append(plan)
        raise RuntimeError("the cluster has no CPU left for it")

    healer = Healer(start, 5.0, max_starts=2, window_s=60.0, backoff_s=0.05)
    plan = WorkerPlan("interpreter", num_cpus=1.0)
    assert healer.state("cpu") == "none is being replaced"
    healer.lost(plan, 1, "cpu")
    assert healer.poll() == [] and len(starts) == 1
    assert healer.poll() == [] and len(starts) == 1  # within its backoff
    assert "no CPU left" in healer.state("cpu")
    time.sleep(0.06)
    healer.poll()
    time.sleep(0.15)
    healer.poll()
    assert len(starts) == 2  # the cap: two within the window
    assert "2 replacements started within 60 s" in healer.state("cpu")
    healer.close()
    assert healer.state("cpu") == "none is being replaced"

"""Faults around the driver, on an in-process pool of replay workers (no Ray) and both backends:
a trial process killed from outside, a resume with a re-measurement in flight, a PostgreSQL
connection killed between writes, a SQLite writer holding the lock, the SQLite file deleted
mid-job, a hanging user kernel under the spec's timeout, an unreachable Ray address."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from db import Database, DatabaseLost, JobStatus, TrialOutcome, repository
from orchestrator.app.running import pool_options
from orchestrator.errors import OrchestratorError
from orchestrator.run.dispatch import ensure_ray
from orchestrator.run.driver import Driver, submit_job
from orchestrator.run.jobs import JobSpec
from orchestrator.run.local_pool import LocalPool
from orchestrator.run.pool import Done
from orchestrator.run.worker import TrialWorker, WorkerPlan
from search_spaces.space import config_key
from tests.faults.checker import assert_held
from tests.faults.conftest import H200, MATMUL_SMALL, FaultPool
from tests.workers.fake_specs import ref
from workers.landscape import read_landscape
from workers.measurement import Measurement, Outcome
from workers.trial import TrialRequest

BUDGET = 6


def spec(trials: int = BUDGET) -> JobSpec:
    return JobSpec.from_mapping({"kernel": "matmul", "problems": [MATMUL_SMALL], "trials": trials})


@pytest.fixture
def local(landscapes: dict[str, list[Path]]) -> Iterator[LocalPool]:
    pool = LocalPool([WorkerPlan("replay", tuple(str(p) for p in landscapes[H200]))])
    yield pool
    pool.shutdown()


def killed(done: Done) -> Done:
    """``done`` as if its trial process had been SIGKILLed from outside (the OOM killer)."""
    m = Measurement(Outcome.CRASH, error="trial process killed by signal SIGKILL")
    m.worker, m.host = done.measurement.worker, done.measurement.host
    return Done(done.request, done.tag, m, done.worker)


def trials(database: Database, job_id: int) -> list[repository.TrialRecord]:
    with database.session(readonly=True) as s:
        return [
            t
            for st in repository.studies_for_job(s, job_id)
            for t in repository.trials_for_study(s, st.id)
        ]


def run_to_done(database: Database, pool: FaultPool) -> int:
    """Submit and run a job of ``spec()`` on ``pool``; check it ended done and held; its id."""
    result = Driver(database, pool, retime_rounds=1, poll_s=0.0).run(
        submit_job(database, spec(), pool)
    )
    assert result.status is JobStatus.DONE
    assert_held(database, [result.job_id])
    return result.job_id


def test_a_trial_killed_from_outside_is_measured_once_more_not_taken_as_its_verdict(
    local: LocalPool, db: Database, landscapes: dict[str, list[Path]]
) -> None:
    """Item 4: the first two results come back ``crash`` (killed): each is kept provisional, not
    counted, and measured again, and the device's own answer is its verdict; the job's budget is
    spent on final verdicts only."""
    pool = FaultPool(local, lambda d, n: killed(d) if n <= 2 else d)
    result = Driver(db, pool, retime_rounds=1, poll_s=0.0).run(submit_job(db, spec(), pool))
    assert result.status is JobStatus.DONE
    rows = trials(db, result.job_id)
    provisional = [t for t in rows if t.provisional]
    assert len(provisional) == 2 and {t.outcome for t in provisional} == {TrialOutcome.CRASH}
    final = [t for t in rows if not t.provisional]
    assert len(final) == BUDGET
    again = {t.config_key for t in provisional}
    (land,) = [x for x in map(read_landscape, landscapes[H200]) if x.problem == MATMUL_SMALL]
    recorded = {key: r.outcome.value for key, r in land.by_config().items()}
    verdicts = {t.config_key: t.outcome.value for t in final if t.config_key in again}
    assert verdicts == {key: recorded.get(key, Outcome.INVALID.value) for key in again}
    assert_held(db, [result.job_id])


def test_a_config_that_crashes_twice_keeps_its_crash(local: LocalPool, db: Database) -> None:
    """The second retryable verdict of a config stands (one re-measurement, no more)."""
    first: dict[str, int] = {}

    def fault(done: Done, n: int) -> Done:
        key = config_key(done.request.config)
        first.setdefault(key, n)
        return killed(done) if first[key] == 1 else done

    pool = FaultPool(local, fault)
    result = Driver(db, pool, retime_rounds=1, poll_s=0.0).run(submit_job(db, spec(), pool))
    crashed = [t for t in trials(db, result.job_id) if t.outcome is TrialOutcome.CRASH]
    assert [t.provisional for t in crashed] == [True, False]
    assert_held(db, [result.job_id])


def test_resume_re_measures_a_provisional_config_left_without_its_final_row(
    local: LocalPool, db: Database
) -> None:
    """The driver stops (e.g. lease lost) right after a provisional row: the re-measurement was
    queued, not in flight; ``resume`` measures it, once, and the study ends complete."""
    stop = threading.Event()

    def fault(done: Done, n: int) -> Done:
        if n == 3:
            stop.set()
            return killed(done)
        return done

    pool = FaultPool(local, fault)
    job_id = submit_job(db, spec(), pool)
    first = Driver(db, pool, retime_rounds=1, poll_s=0.0, stop=stop.is_set).run(job_id)
    assert first.status is JobStatus.QUEUED
    left = [t for t in trials(db, job_id) if t.provisional]
    assert len(left) == 1
    second = Driver(db, local, retime_rounds=1, poll_s=0.0).run(job_id)
    assert second.status is JobStatus.DONE
    rows = trials(db, job_id)
    assert [t.outcome for t in rows if t.config_key == left[0].config_key] == [
        TrialOutcome.CRASH,
        TrialOutcome.OK,
    ]
    assert_held(db, [job_id])


@pytest.mark.postgres
def test_a_postgresql_connection_killed_between_writes_loses_nothing(
    local: LocalPool, empty_url: str, pg_admin: Engine, backend: str
) -> None:
    """Items 7 and the one that held: every connection of the job is terminated after the second
    result; the next write meets a dead connection, is retried, and the job ends done."""
    if backend != "postgresql":
        pytest.skip("a PostgreSQL scenario")
    app = f"tf_fault_{os.getpid()}_{time.monotonic_ns()}"
    url = sa.make_url(empty_url).update_query_dict({"application_name": app})
    database = Database(url.render_as_string(hide_password=False))
    database.upgrade()

    def fault(done: Done, n: int) -> Done:
        if n == 2:
            with pg_admin.connect() as conn:
                killed_n = conn.execute(
                    sa.text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE application_name = :app"
                    ),
                    {"app": app},
                ).scalar()
            assert killed_n
        return done

    run_to_done(database, FaultPool(local, fault))
    database.close()


def test_another_sqlite_writer_holding_the_lock_past_the_busy_timeout_fails_nothing(
    local: LocalPool, tmp_path: Path
) -> None:
    """Item 7: another process holds the SQLite write lock for 1.5 s (busy timeout 0.5 s) right
    after a result: the write is retried and the job ends done, every result kept."""
    path = tmp_path / "tf.db"
    database = Database(f"sqlite:///{path}", busy_timeout_s=0.5)
    database.upgrade()
    held = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(1.5)
        conn.execute("ROLLBACK")
        conn.close()

    def fault(done: Done, n: int) -> Done:
        if n == 2:
            threading.Thread(target=hold, daemon=True).start()
            held.wait()
        return done

    run_to_done(database, FaultPool(local, fault))


def test_the_sqlite_file_deleted_mid_job_stops_it_with_nothing_written_anywhere(
    local: LocalPool, tmp_path: Path
) -> None:
    """Item 3: the file is deleted after the second result; the driver raises DatabaseLost, no
    empty database takes its place, and nothing more is measured than was in flight."""
    path = tmp_path / "tf.db"
    database = Database(f"sqlite:///{path}")
    database.upgrade()
    at: list[int] = []

    def fault(done: Done, n: int) -> Done:
        if n == 2:
            path.unlink()
            at.append(local.in_flight)
        return done

    pool = FaultPool(local, fault)
    job_id = submit_job(database, spec(), pool)
    with pytest.raises(DatabaseLost):
        Driver(database, pool, retime_rounds=1, poll_s=0.0).run(job_id)
    assert not path.exists()
    assert pool.seen <= 2 + at[0]


def test_the_spec_timeouts_reach_the_runner_a_hanging_kernel_costs_two_seconds() -> None:
    """Item 10: the job's pool options (orchestrator.app.running.pool_options) carry the spec's timeouts into the
    worker's runner."""
    job = JobSpec.from_mapping(
        {"kernel": "matmul", "problems": [MATMUL_SMALL], "run_timeout_s": 2, "compile_timeout_s": 2}
    )
    options = pool_options(job)
    assert (options.compile_timeout_s, options.run_timeout_s) == (2.0, 2.0)
    worker = TrialWorker(WorkerPlan("interpreter"), options, node_id="local")
    try:
        m = worker.run(TrialRequest(ref("SleepLaterSpec"), {"N": 40}, {"BLOCK": 16}))
    finally:
        worker.close()
    assert m.outcome is Outcome.RUN_TIMEOUT
    assert "2 s" in (m.error or "")


def test_an_unreachable_ray_address_fails_at_once_in_one_line() -> None:
    """Item 10: nothing listens on the port: a one-line OrchestratorError, no Ray started."""
    import ray

    with pytest.raises(
        OrchestratorError, match=r"no Ray cluster answers at 127\.0\.0\.1:9"
    ) as info:
        ensure_ray("127.0.0.1:9")
    assert "\n" not in str(info.value)
    assert not ray.is_initialized()

"""The storage contract, run once per backend (SQLite file, PostgreSQL schema) by the ``backend`` fixture."""

from __future__ import annotations

import math
import multiprocessing
import queue
import time
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from db import (
    ConstraintViolation,
    Database,
    InvalidRecord,
    InvalidTransition,
    JobKind,
    JobStatus,
    NotFound,
    Objective,
    SchemaOutOfDate,
    StudyStatus,
    TrialOutcome,
)
from db import repository as repo
from db.models import Base, Trial
from db.session import VERSION_TABLE
from db.states import BestBackend, RevalidationState
from tests.db._upsert_worker import CLASS_KEY, KEY, best_key, hammer

HEAD = "0009"
TABLES = {
    "tf_device_classes",
    "tf_environments",
    "tf_kernels",
    "tf_jobs",
    "tf_studies",
    "tf_trials",
    "tf_best_configs",
    "tf_tokens",
    "tf_audit",
    VERSION_TABLE,
}


def _setup(db: Database) -> dict[str, int]:
    """A device class, environment, kernel, job and study; their ids."""
    with db.session() as s:
        dc = repo.ensure_device_class(s, "NVIDIA H200", "nvidia", "NVIDIA H200", "sm_90")
        env = repo.ensure_environment(s, dc, "560.35", "12.6", "3.6.0", "2.9.0")
        kernel = repo.ensure_kernel(s, "matmul", "v1", "space1")
        job = repo.create_job(s, kernel, {"kernel": "matmul", "budget": {"trials": 10}}, "ml")
        study = repo.ensure_study(
            s, job, kernel, '{"M":64}', {"M": 64}, dc, "tpe", f"job{job}-matmul"
        )
    return {"dc": dc, "env": env, "kernel": kernel, "job": job, "study": study}


def _trial(
    s: Any,
    ids: dict[str, int],
    outcome: str,
    config_key: str = '{"BLOCK":64}',
    objective: Objective = Objective.KERNEL,
) -> int:
    return repo.record_trial(
        s,
        kernel_id=ids["kernel"],
        problem_key='{"M":64}',
        device_class_id=ids["dc"],
        config={"BLOCK": 64},
        config_key=config_key,
        outcome=outcome,
        job_id=ids["job"],
        study_id=ids["study"],
        objective=objective,
    )


def _fields(ids: dict[str, int]) -> dict[str, Any]:
    """A trial of config BLOCK=64 on the M=64 study of :func:`_setup`, less its outcome."""
    return {
        "kernel_id": ids["kernel"],
        "problem_key": '{"M":64}',
        "device_class_id": ids["dc"],
        "config": {"BLOCK": 64},
        "config_key": '{"BLOCK":64}',
        "job_id": ids["job"],
        "study_id": ids["study"],
    }


def _best(s: Any, time_ms: float, config: dict[str, Any], **key: Any) -> bool:
    """Upsert ``config`` for the tests' key with ``key``'s changes (a ``device_class_id`` given
    is taken as it is: nothing but the upsert is sent)."""
    base = KEY if "device_class_id" in key else best_key(s)
    return repo.upsert_best(
        s,
        **{**base, **key},
        config=config,
        time_ms=time_ms,
        trial_id=None,
        job_id=None,
        environment_id=None,
    )


def _migrate(database: Database, revision: str, down: bool = False) -> None:
    """Move ``database``'s schema to ``revision`` as Database.upgrade does, in one transaction."""
    config = database._alembic_config()
    with database.engine.connect() as conn, conn.begin():
        config.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(config, revision)


def _move(db: Database, job: int, *path: JobStatus) -> None:
    for status in path:
        with db.session() as s:
            repo.set_job_status(s, job, status)


def _reuse_into(s: Session, ids: dict[str, int]) -> dict[str, Any]:
    """``reuse_measured``'s target: a new job's study of M=64 and the config it names."""
    job = repo.create_job(s, ids["kernel"], {"kernel": "matmul"}, "ml")
    study = repo.ensure_study(
        s, job, ids["kernel"], '{"M":64}', {"M": 64}, ids["dc"], "tpe", "other"
    )
    return {"job_id": job, "study_id": study, "config": {"BLOCK": 64}}


class TestStorage:
    def test_upgrade_creates_schema_once_matching_models(self, empty_url: str) -> None:
        database = Database(empty_url)
        try:
            assert database.current_revision() is None
            database.upgrade()
            head = database.current_revision()
            assert head is not None
            database.upgrade()
            assert database.current_revision() == head
            database.check_schema()
            with database.engine.connect() as conn:
                assert set(sa.inspect(conn).get_table_names()) >= TABLES
                context = MigrationContext.configure(
                    conn, opts={"compare_type": True, "version_table": VERSION_TABLE}
                )
                assert compare_metadata(context, Base.metadata) == []
        finally:
            database.close()

    def test_schema_out_of_date_until_upgraded(self, empty_url: str) -> None:
        database = Database(empty_url)
        try:
            with pytest.raises(SchemaOutOfDate, match="tunefleet db upgrade") as info:
                database.check_schema()
            assert "\n" not in str(info.value)
            with (
                pytest.raises(SchemaOutOfDate, match="tunefleet db upgrade"),
                database.session() as s,
            ):
                repo.list_jobs(s)
            database.ensure_schema()
            database.check_schema()
            with database.session() as s:
                assert repo.list_jobs(s) == []
        finally:
            database.close()

    def test_get_or_create_is_idempotent(self, db: Database) -> None:
        first = _setup(db)
        with db.session() as s:
            dc = repo.ensure_device_class(s, "NVIDIA H200", "nvidia", "other", "sm_00")
            assert dc == first["dc"]
            assert (
                repo.ensure_environment(s, dc, "560.35", "12.6", "3.6.0", "2.9.0") == first["env"]
            )
            assert repo.ensure_kernel(s, "matmul", "v1", "space1") == first["kernel"]
            study = repo.ensure_study(
                s, first["job"], first["kernel"], '{"M":64}', {"M": 64}, dc, "tpe", "x"
            )
            assert study == first["study"]
            assert repo.ensure_kernel(s, "matmul", "v2", "space1") != first["kernel"]
            replay = repo.ensure_device_class(
                s, "replay:NVIDIA H200", "nvidia", "NVIDIA H200", "sm_90", replay=True
            )
            assert replay != dc
            assert repo.ensure_environment(s, replay, "560.35", "12.6", "3.6.0", "2.9.0") not in (
                first["env"],
            )
            counts = {
                table: s.scalar(sa.text(f"SELECT count(*) FROM {table}"))
                for table in ("tf_device_classes", "tf_environments", "tf_kernels", "tf_studies")
            }
        assert counts == {
            "tf_device_classes": 2,
            "tf_environments": 2,
            "tf_kernels": 2,
            "tf_studies": 1,
        }

    def test_get_or_create_survives_a_concurrent_insert(
        self, db: Database, empty_url: str, backend: str
    ) -> None:
        if backend == "sqlite":
            pytest.skip("SQLite writers hold the lock from BEGIN IMMEDIATE: no insert race")
        rival = Database(empty_url)
        rival_ids: list[int] = []

        def insert_first(conn: Connection, cursor: Any, statement: str, *_: Any) -> None:
            if statement.startswith("INSERT INTO tf_kernels") and not rival_ids:
                with rival.session() as r:
                    rival_ids.append(repo.ensure_kernel(r, "matmul", "v9", "space"))

        sa.event.listen(db.engine, "before_cursor_execute", insert_first)
        try:
            with db.session() as s:
                kernel = repo.ensure_kernel(s, "matmul", "v9", "space")
                job = repo.create_job(s, kernel, {}, None)
        finally:
            sa.event.remove(db.engine, "before_cursor_execute", insert_first)
            rival.close()
        assert rival_ids == [kernel]
        with db.session(readonly=True) as s:
            assert repo.get_job(s, job).kernel_id == kernel

    def test_job_lifecycle_and_resume(self, db: Database) -> None:
        job = _setup(db)["job"]
        with db.session(readonly=True) as s:
            assert repo.get_job(s, job).status is JobStatus.QUEUED
        _move(db, job, JobStatus.RUNNING)
        with db.session() as s:
            started = repo.get_job(s, job).started_at
            assert started is not None
            repo.request_cancel(s, job)
            repo.set_job_status(s, job, JobStatus.FAILED, error="driver lost")
        with db.session() as s:
            failed = repo.get_job(s, job)
            assert (failed.status, failed.error) == (JobStatus.FAILED, "driver lost")
            assert failed.finished_at is not None
            assert failed.cancel_requested is True
            repo.set_job_status(s, job, "running")
        with db.session() as s:
            resumed = repo.get_job(s, job)
            assert resumed.status is JobStatus.RUNNING
            assert (resumed.error, resumed.finished_at, resumed.started_at) == (None, None, started)
            assert resumed.cancel_requested is False
            assert repo.cancel_requested(s, job) is False
            repo.set_job_status(s, job, JobStatus.RUNNING)
            repo.request_cancel(s, job)
        with db.session() as s:
            assert repo.get_job(s, job).cancel_requested is True
            assert repo.cancel_requested(s, job) is True
            with pytest.raises(NotFound):
                repo.cancel_requested(s, 999)
            repo.set_job_status(s, job, JobStatus.CANCELLED)
            repo.set_job_status(s, job, JobStatus.RUNNING)
            repo.set_job_status(s, job, JobStatus.DONE)
        with db.session() as s:
            assert repo.get_job(s, job).status is JobStatus.DONE

    @pytest.mark.parametrize(
        ("path", "target"),
        [
            ((), JobStatus.DONE),
            ((), JobStatus.FAILED),
            ((JobStatus.RUNNING, JobStatus.DONE), JobStatus.RUNNING),
            ((JobStatus.RUNNING, JobStatus.DONE), JobStatus.CANCELLED),
            ((JobStatus.CANCELLED,), JobStatus.DONE),
            ((JobStatus.RUNNING, JobStatus.FAILED), JobStatus.QUEUED),
        ],
    )
    def test_illegal_transition_is_refused_and_rolled_back(
        self, db: Database, path: tuple[JobStatus, ...], target: JobStatus
    ) -> None:
        job = _setup(db)["job"]
        _move(db, job, *path)
        before = path[-1] if path else JobStatus.QUEUED
        with (
            pytest.raises(InvalidTransition, match=f"from {before.value} to {target.value}"),
            db.session() as s,
        ):
            repo.set_job_status(s, job, target, error="should not stick")
        with db.session() as s:
            record = repo.get_job(s, job)
        assert (record.status, record.error) == (before, None)

    def test_job_errors(self, db: Database) -> None:
        job = _setup(db)["job"]
        with db.session() as s:
            with pytest.raises(InvalidRecord, match="unknown job status 'paused'"):
                repo.set_job_status(s, job, "paused")
            with pytest.raises(NotFound, match="no job 999"):
                repo.get_job(s, 999)
            with pytest.raises(NotFound):
                repo.request_cancel(s, 999)
        _move(db, job, JobStatus.RUNNING, JobStatus.DONE)
        with pytest.raises(InvalidTransition, match="already done"), db.session() as s:
            repo.request_cancel(s, job)

    def test_list_jobs_newest_first(self, db: Database) -> None:
        ids = _setup(db)
        with db.session() as s:
            more = [repo.create_job(s, ids["kernel"], {"n": n}, None) for n in range(3)]
        with db.session(readonly=True) as s:
            jobs = repo.list_jobs(s, limit=2)
        assert [j.id for j in jobs] == [more[2], more[1]]
        assert (jobs[0].spec, jobs[0].kernel_name, jobs[0].kernel_version) == (
            {"n": 2},
            "matmul",
            "v1",
        )

    def test_record_trial_round_trips(self, db: Database) -> None:
        ids = _setup(db)
        config = {"BLOCK_M": 128, "EVEN_K": True, "layout": "nt", "num_warps": 4}
        samples = [0.125, 0.1251, 0.13, 1e-6, 12345.678901]
        with db.session() as s:
            trial = repo.record_trial(
                s,
                kernel_id=ids["kernel"],
                problem_key='{"M":64}',
                device_class_id=ids["dc"],
                environment_id=ids["env"],
                config=config,
                config_key='{"BLOCK_M":128}',
                outcome="ok",
                job_id=ids["job"],
                study_id=ids["study"],
                samples_ms=samples,
                median_ms=0.1251,
                iqr_ms=0.005,
                max_rel_error=1e-3,
                compile_s=0.23,
                run_s=1.5,
                worker="w1",
                host="h1",
                reused=True,
            )
            _trial(s, ids, TrialOutcome.CRASH)
            _trial(s, ids, "crash")
        with db.session(readonly=True) as s:
            records = repo.trials_for_study(s, ids["study"])
            counts = repo.outcome_counts(s, ids["study"])
        first = records[0]
        assert first.id == trial
        assert first.config == config
        assert first.samples_ms == samples
        assert first.outcome is TrialOutcome.OK
        assert (first.median_ms, first.compile_s, first.worker, first.reused) == (
            0.1251,
            0.23,
            "w1",
            True,
        )
        assert first.created_at.tzinfo is not None
        assert counts == {"ok": 1, "crash": 2}

    def test_record_trial_rejects_bad_input(self, db: Database) -> None:
        ids = _setup(db)
        with pytest.raises(InvalidRecord, match="unknown trial outcome 'slow'"), db.session() as s:
            _trial(s, ids, "slow")
        with pytest.raises(ConstraintViolation, match="constraint"), db.session() as s:
            _trial(s, ids, "ok")
            _trial(s, {**ids, "kernel": 999}, "ok")
        with db.session(readonly=True) as s:
            assert repo.trials_for_study(s, ids["study"]) == []

    def test_find_measured_ignores_infra(self, db: Database) -> None:
        ids = _setup(db)
        args = (ids["kernel"], '{"M":64}', ids["dc"], '{"BLOCK":64}')
        with db.session() as s:
            _trial(s, ids, "infra")
            assert repo.find_measured(s, *args) is None
            wrong = _trial(s, ids, "wrong")
            _trial(s, ids, "infra")
            _trial(s, ids, "ok", config_key='{"BLOCK":32}')
            found = repo.find_measured(s, *args)
            assert found is not None
            assert (found.id, found.outcome) == (wrong, TrialOutcome.WRONG)
            assert repo.find_measured(s, ids["kernel"], '{"M":128}', ids["dc"], args[3]) is None

    def test_reuse_measured_copies_the_newest_verdict_into_a_reused_row(self, db: Database) -> None:
        ids = _setup(db)
        key = (ids["kernel"], '{"M":64}', ids["dc"], '{"BLOCK":64}', Objective.KERNEL)
        with db.session() as s:
            into = _reuse_into(s, ids)
            job, other = into["job_id"], into["study_id"]
            _trial(s, ids, "infra")
            assert repo.reuse_measured(s, *key, **into) is None  # no verdict: nothing written
            assert repo.trials_for_study(s, other) == []
            measured = repo.record_trial(
                s, **{**_fields(ids), "outcome": "ok", "samples_ms": [1.5, 1.25],
                      "median_ms": 1.25, "environment_id": ids["env"], "worker": "w3"}
            )  # fmt: skip
            _trial(s, ids, "ok", objective=Objective.GRAPH)  # another objective: not reused
            reused = repo.reuse_measured(s, *key, **into)
            assert reused is not None
            assert (reused.outcome, reused.median_ms) == (TrialOutcome.OK, 1.25)
            (row,) = repo.trials_for_study(s, other)
            assert row.id == reused.id > measured
            assert (row.reused, row.provisional, row.job_id, row.config) == (
                True, False, job, {"BLOCK": 64}
            )  # fmt: skip
            assert (row.samples_ms, row.environment_id, row.worker) == (
                [1.5, 1.25],
                ids["env"],
                "w3",
            )
            assert row.created_at.tzinfo is not None

    def test_cancels_requested_reads_the_flags_of_the_jobs_asked_about(self, db: Database) -> None:
        ids = _setup(db)
        with db.session() as s:
            jobs = [repo.create_job(s, ids["kernel"], {"kernel": "matmul"}, "ml") for _ in range(3)]
            repo.request_cancel(s, jobs[1])
            repo.request_cancel(s, jobs[2])
        with db.session() as s:
            assert repo.cancels_requested(s, jobs[:2]) == {jobs[1]}
            assert repo.cancels_requested(s, []) == set()

    def test_write_one_commits_its_statement_and_a_violation_writes_nothing(
        self, db: Database
    ) -> None:
        ids = _setup(db)
        key = (ids["kernel"], '{"M":64}', ids["dc"], '{"BLOCK":64}', Objective.KERNEL)
        with db.session() as s:
            into = _reuse_into(s, ids)
            _trial(s, ids, "ok")
        study = into["study_id"]
        reused = db.write_one(lambda c: repo.reuse_measured(c, *key, **into))
        assert reused is not None
        with db.session(readonly=True) as s:  # another connection sees it: committed
            assert [r.id for r in repo.trials_for_study(s, study)] == [reused.id]
        with pytest.raises(ConstraintViolation):  # no such study: the foreign key refuses it
            db.write_one(lambda c: repo.reuse_measured(c, *key, **{**into, "study_id": 10**9}))
        with db.session(readonly=True) as s:
            assert len(repo.trials_for_study(s, study)) == 1

    def test_measured_keys_reads_verdicts_newer_than_an_id(self, db: Database) -> None:
        ids = _setup(db)
        args = (ids["kernel"], '{"M":64}', ids["dc"], Objective.KERNEL)
        with db.session() as s:
            _trial(s, ids, "infra", config_key='{"BLOCK":16}')
            _trial(s, ids, "ok", config_key='{"BLOCK":16}', objective=Objective.GRAPH)
            wrong = _trial(s, ids, "wrong")
            assert repo.measured_keys(s, *args) == ({'{"BLOCK":64}'}, wrong)
            ok = _trial(s, ids, "ok", config_key='{"BLOCK":32}')
            assert repo.measured_keys(s, *args, after_id=wrong) == ({'{"BLOCK":32}'}, ok)
            assert repo.measured_keys(s, *args, after_id=ok) == (set(), ok)

    def test_record_trials_writes_a_batch_and_gives_each_rows_id_in_order(
        self, db: Database
    ) -> None:
        ids = _setup(db)
        rows: list[repo.TrialFields] = [
            {
                "kernel_id": ids["kernel"],
                "problem_key": '{"M":64}',
                "device_class_id": ids["dc"],
                "config": {"BLOCK": 2**i},
                "config_key": f'{{"BLOCK":{2**i}}}',
                "outcome": "ok" if i % 3 else "wrong",
                "samples_ms": [1.0 + i, 2.0 + i] if i % 3 else None,
                "median_ms": 1.5 + i if i % 3 else None,
                "study_id": ids["study"],
            }
            for i in range(12)
        ]
        with db.session() as s:
            written = repo.record_trials(s, rows)
            assert repo.record_trials(s, []) == []
        assert len(set(written)) == 12
        with db.session(readonly=True) as s:
            stored = {t.id: t for t in repo.trials_for_study(s, ids["study"])}
        for row, row_id in zip(rows, written, strict=True):
            t = stored[row_id]
            assert (t.config, t.config_key, t.outcome.value) == (
                row["config"],
                row["config_key"],
                row["outcome"],
            )
            assert (t.samples_ms, t.median_ms, t.reused, t.provisional) == (
                row["samples_ms"],
                row["median_ms"],
                False,
                False,
            )
            assert t.objective is Objective.KERNEL and t.created_at is not None
        with db.session(readonly=True) as s:
            # No samples is JSON null, as SQLAlchemy's JSON type writes None, not SQL NULL.
            nulls = s.scalar(sa.select(sa.func.count()).where(Trial.samples_ms.is_(None)))
            assert nulls == 0

    def test_record_trials_writes_every_column_of_the_trial_table(self, db: Database) -> None:
        """Each column the trial model has (but the id and the time) comes back as given: a
        column the batch insert leaves out (PostgreSQL's ``unnest`` lists its own) fails here."""
        ids = _setup(db)
        fields: dict[str, Any] = {
            "job_id": ids["job"],
            "study_id": ids["study"],
            "kernel_id": ids["kernel"],
            "problem_key": '{"M":64}',
            "device_class_id": ids["dc"],
            "environment_id": ids["env"],
            "config": {"BLOCK": 64, "name": 'it\'s "quoted" \u00e9'},
            "config_key": '{"BLOCK":64}',
            "outcome": "ok",
            "objective": "graph",
            "samples_ms": [1.25, 1.5, 2.0],
            "median_ms": 1.5,
            "iqr_ms": 0.25,
            "max_rel_error": float("inf"),
            "compile_s": 2.5,
            "run_s": 0.75,
            "error": "none; it's fine",
            "worker": "w0",
            "host": "h0",
            "reused": True,
            "provisional": False,
        }
        with db.session() as s:
            (row_id,) = repo.record_trials(s, [fields])  # type: ignore[list-item]
        with db.session(readonly=True) as s:
            row = s.get(Trial, row_id)
            assert row is not None and row.created_at is not None
            got = {
                c.name: getattr(row, c.name)
                for c in Trial.__table__.columns
                if c.name not in ("id", "created_at")
            }
        got["outcome"], got["objective"] = got["outcome"].value, got["objective"].value
        assert got == fields

    @pytest.mark.parametrize("bad", [math.inf, math.nan])
    def test_a_batch_with_a_non_finite_sample_is_refused_whole(
        self, db: Database, bad: float
    ) -> None:
        """JSON has no infinity or NaN (PostgreSQL's json type refuses them): every backend
        refuses such a sample with our error, before any row of the batch is written."""
        ids = _setup(db)

        def row(key: str, samples: list[float]) -> dict[str, Any]:
            return {
                "kernel_id": ids["kernel"],
                "problem_key": '{"M":64}',
                "device_class_id": ids["dc"],
                "config": {"BLOCK": 1},
                "config_key": key,
                "outcome": "ok",
                "samples_ms": samples,
                "median_ms": 1.0,
            }

        batch = [row('{"BLOCK":1}', [1.0]), row('{"BLOCK":2}', [1.0, bad])]
        with pytest.raises(InvalidRecord, match="finite"), db.session() as s:
            repo.record_trials(s, batch)  # type: ignore[arg-type]
        with db.session(readonly=True) as s:
            assert s.scalar(sa.select(sa.func.count()).select_from(Trial)) == 0

    def test_verdicts_after_an_id_come_by_study_key_from_the_new_rows_only(
        self, db: Database
    ) -> None:
        ids = _setup(db)
        key = (ids["kernel"], '{"M":64}', ids["dc"], Objective.KERNEL)
        graph = (*key[:3], Objective.GRAPH)
        with db.session() as s:
            assert repo.last_trial_id(s) == 0
            first = _trial(s, ids, "ok", config_key='{"BLOCK":16}')
            _trial(s, ids, "infra", config_key='{"BLOCK":8}')
            _trial(s, ids, "wrong", config_key='{"BLOCK":32}', objective=Objective.GRAPH)
            last = _trial(s, ids, "ok", config_key='{"BLOCK":64}')
            assert repo.last_trial_id(s) == last
            assert repo.verdicts_after(s, 0) == (
                {key: {'{"BLOCK":16}', '{"BLOCK":64}'}, graph: {'{"BLOCK":32}'}},
                last,
            )
            assert repo.verdicts_after(s, first) == (
                {key: {'{"BLOCK":64}'}, graph: {'{"BLOCK":32}'}},
                last,
            )
            assert repo.verdicts_after(s, last) == ({}, last)

    @pytest.mark.parametrize("outcome", ["crash", "compile_timeout", "run_timeout"])
    def test_provisional_verdict_is_never_a_permanent_answer(
        self, db: Database, outcome: str
    ) -> None:
        ids = _setup(db)
        args = (ids["kernel"], '{"M":64}', ids["dc"], '{"BLOCK":64}')
        with db.session() as s:
            first = repo.record_trial(
                s,
                kernel_id=ids["kernel"],
                problem_key='{"M":64}',
                device_class_id=ids["dc"],
                config={"BLOCK": 64},
                config_key='{"BLOCK":64}',
                outcome=outcome,
                study_id=ids["study"],
                provisional=True,
            )
            # Killed from outside or timed out on a loaded node: not the config's own verdict.
            assert repo.find_measured(s, *args) is None
            assert repo.measured_for_key(s, *args[:3]) == []
            (kept,) = repo.trials_for_study(s, ids["study"])
            assert (kept.id, kept.provisional) == (first, True)
            # The re-measurement gives the same verdict: now it stands.
            confirmed = _trial(s, ids, outcome)
            found = repo.find_measured(s, *args)
            assert found is not None and (found.id, found.provisional) == (confirmed, False)
            assert [r.outcome.value for r in repo.measured_for_key(s, *args[:3])] == [outcome]

    @pytest.mark.parametrize("outcome", ["ok", "wrong", "invalid", "compile_error", "infra"])
    def test_only_retryable_outcomes_can_be_provisional(self, db: Database, outcome: str) -> None:
        ids = _setup(db)
        with db.session() as s, pytest.raises(InvalidRecord, match="retryable outcome"):
            repo.record_trial(
                s,
                kernel_id=ids["kernel"],
                problem_key='{"M":64}',
                device_class_id=ids["dc"],
                config={},
                config_key="{}",
                outcome=outcome,
                provisional=True,
            )

    def test_times_of_different_objectives_are_never_mixed(self, db: Database) -> None:
        ids = _setup(db)
        args = (ids["kernel"], '{"M":64}', ids["dc"], '{"BLOCK":64}')
        with db.session() as s:
            kernel_trial = _trial(s, ids, "ok")
            assert repo.find_measured(s, *args, Objective.GRAPH) is None
            assert repo.measured_for_key(s, *args[:3], Objective.GRAPH) == []
            graph_trial = _trial(s, ids, "ok", objective=Objective.GRAPH)
            found = repo.find_measured(s, *args)
            assert found is not None and (found.id, found.objective) == (
                kernel_trial,
                Objective.KERNEL,
            )
            found = repo.find_measured(s, *args, Objective.GRAPH)
            assert found is not None and found.id == graph_trial
            assert len(repo.measured_for_key(s, *args[:3], Objective.GRAPH)) == 1
            assert _best(s, 2.0, {"v": "kernel"}) is True
            assert _best(s, 1.0, {"v": "graph"}, objective=Objective.GRAPH) is True
            assert _best(s, 1.5, {"v": "graph, slower"}, objective=Objective.GRAPH) is False
        with db.session(readonly=True) as s:
            assert [(b.config, b.objective) for b in repo.get_best(s, "matmul")] == [
                ({"v": "kernel"}, Objective.KERNEL)
            ]
            graph = repo.get_best(s, "matmul", objective=Objective.GRAPH)
            assert [(b.config, b.time_ms) for b in graph] == [({"v": "graph"}, 1.0)]
            assert len(repo.get_best(s, "matmul", objective=None)) == 2

    def test_upgrade_from_0001_keeps_rows_as_kernel_times(self, empty_url: str) -> None:
        database = Database(empty_url)
        try:
            _migrate(database, "0001")
            # A trial and a best config that refers to it, as every 0001 database with results
            # has (the foreign key must survive the migration).
            statements = (
                "INSERT INTO tf_device_classes (id, key, vendor, name, arch, replay) VALUES "
                "(1, 'NVIDIA H200', 'nvidia', 'NVIDIA H200', 'sm_90', false)",
                "INSERT INTO tf_kernels (id, name, version_hash, space_hash) VALUES "
                "(1, 'matmul', 'v1', 's1')",
                "INSERT INTO tf_trials (id, kernel_id, problem_key, device_class_id, config, "
                "config_key, outcome, median_ms, reused, created_at) VALUES (1, 1, :problem, 1, "
                "'{}', '{}', 'ok', 2.0, false, CURRENT_TIMESTAMP)",
                "INSERT INTO tf_best_configs (kernel_name, kernel_version, problem_key, "
                "device_class_key, triton_minor, config, time_ms, trial_id, updated_at) VALUES "
                "('matmul', 'v1', :problem, 'NVIDIA H200', '3.6', '{}', 2.0, 1, "
                "CURRENT_TIMESTAMP)",
            )
            with database.engine.begin() as conn:
                for statement in statements:
                    conn.execute(sa.text(statement), {"problem": '{"M":64}'})
            database.upgrade()
            database.check_schema()
            with database.session() as s:
                (old,) = repo.get_best(s, "matmul")
                assert (old.objective, old.time_ms, old.trial_id) == (Objective.KERNEL, 2.0, 1)
                found = repo.find_measured(s, 1, '{"M":64}', 1, "{}")
                assert found is not None and found.objective is Objective.KERNEL
                assert _best(s, 3.0, {"v": "graph"}, objective=Objective.GRAPH) is True
            with pytest.raises(RuntimeError, match="graph-objective rows"):
                _migrate(database, "0001", down=True)
            assert database.current_revision() == HEAD  # the failed downgrade changed nothing
            with database.session() as s:
                assert len(repo.get_best(s, "matmul", objective=None)) == 2
                s.execute(sa.text("DELETE FROM tf_best_configs WHERE objective = 'graph'"))
            _migrate(database, "0001", down=True)  # with no graph rows left, it goes back
            assert database.current_revision() == "0001"
            database.upgrade()
            with database.session(readonly=True) as s:
                assert [b.trial_id for b in repo.get_best(s, "matmul")] == [1]
        finally:
            database.close()

    def test_measured_for_key_skips_infra_oldest_first(self, db: Database) -> None:
        ids = _setup(db)
        with db.session() as s:
            assert repo.measured_for_key(s, ids["kernel"], '{"M":64}', ids["dc"]) == []
            _trial(s, ids, "infra")
            _trial(s, ids, "wrong", config_key='{"BLOCK":32}')
            repo.record_trial(
                s,
                kernel_id=ids["kernel"],
                problem_key='{"M":64}',
                device_class_id=ids["dc"],
                config={"BLOCK": 128},
                config_key='{"BLOCK":128}',
                outcome="ok",
                median_ms=0.5,
            )
            _trial(s, ids, "ok")
            other = repo.ensure_device_class(s, "cpu", "cpu", "cpu", "interpreter")
            _trial(s, {**ids, "dc": other}, "ok")
        with db.session(readonly=True) as s:
            rows = repo.measured_for_key(s, ids["kernel"], '{"M":64}', ids["dc"])
            assert repo.measured_for_key(s, ids["kernel"], '{"M":128}', ids["dc"]) == []
        assert [(r.config_key, r.outcome, r.median_ms) for r in rows] == [
            ('{"BLOCK":32}', TrialOutcome.WRONG, None),
            ('{"BLOCK":128}', TrialOutcome.OK, 0.5),
            ('{"BLOCK":64}', TrialOutcome.OK, None),
        ]
        assert rows[1].config == {"BLOCK": 128}

    def test_fastest_ok_configs_are_per_key_fastest_first_and_ok_only(self, db: Database) -> None:
        ids = _setup(db)
        timed = {"kernel_id": ids["kernel"], "device_class_id": ids["dc"], "outcome": "ok"}
        with db.session() as s:
            other = repo.ensure_device_class(s, "cpu", "cpu", "cpu", "interpreter")
            for key, block, ms, extra in (
                ('{"M":64}', 64, 0.5, {}),
                ('{"M":64}', 32, 0.3, {}),
                ('{"M":64}', 16, 0.1, {"outcome": "wrong"}),
                ('{"M":64}', 8, 0.05, {"outcome": "crash", "provisional": True}),
                ('{"M":64}', 4, 0.01, {"objective": Objective.GRAPH}),
                ('{"M":64}', 2, 0.01, {"device_class_id": other}),
                ('{"M":16}', 128, 0.2, {}),
                ('{"M":8}', 256, 0.1, {}),
            ):
                repo.record_trial(
                    s, **{**timed, "problem_key": key, "config": {"BLOCK": block},
                          "config_key": f'{{"BLOCK":{block}}}', "median_ms": ms, **extra},
                )  # fmt: skip
            repo.record_trial(
                s, **timed, problem_key='{"M":64}', config={"BLOCK": 1}, config_key='{"BLOCK":1}'
            )  # ok without a time
        with db.session(readonly=True) as s:

            def fastest(key: str, kernels: list[int]) -> list[tuple[dict[str, Any], float]]:
                return list(repo.fastest_ok_configs(s, kernels, Objective.KERNEL, ids["dc"], key))

            assert fastest('{"M":64}', [ids["kernel"]]) == [
                ({"BLOCK": 32}, 0.3),
                ({"BLOCK": 64}, 0.5),
            ]
            assert fastest('{"M":16}', [ids["kernel"]]) == [({"BLOCK": 128}, 0.2)]
            assert fastest('{"M":99}', [ids["kernel"]]) == []
            assert fastest('{"M":64}', []) == []

    def test_fastest_ok_configs_read_past_a_page_in_order(self, db: Database) -> None:
        ids = _setup(db)
        with db.session() as s:
            for n in range(150):  # more than two pages, recorded out of time order
                ms = ((n * 37) % 150 + 1) / 1000
                repo.record_trial(
                    s, kernel_id=ids["kernel"], device_class_id=ids["dc"], outcome="ok",
                    problem_key='{"M":64}', config={"BLOCK": n}, config_key=f'{{"BLOCK":{n}}}',
                    median_ms=ms,
                )  # fmt: skip
        with db.session(readonly=True) as s:
            times = [
                ms
                for _, ms in repo.fastest_ok_configs(
                    s, [ids["kernel"]], Objective.KERNEL, ids["dc"], '{"M":64}'
                )
            ]
        assert times == sorted(times) and len(times) == 150

    def test_studies_for_job_carry_their_device_class(self, db: Database) -> None:
        ids = _setup(db)
        limits = {"vendor": "cpu", "warp_size": 32}
        with db.session() as s:
            cpu = repo.ensure_device_class(s, "cpu", "cpu", "cpu", "interpreter", limits=limits)
            second = repo.ensure_study(
                s, ids["job"], ids["kernel"], '{"M":128}', {"M": 128}, cpu, "random", "n2"
            )
            repo.set_study_status(s, second, "done")
        with db.session(readonly=True) as s:
            studies = repo.studies_for_job(s, ids["job"])
            assert repo.studies_for_job(s, ids["job"] + 1) == []
        assert [st.id for st in studies] == [ids["study"], second]
        first, last = studies
        assert (first.problem_key, first.problem, first.sampler, first.status) == (
            '{"M":64}',
            {"M": 64},
            "tpe",
            StudyStatus.RUNNING,
        )
        assert (first.job_id, first.kernel_id) == (ids["job"], ids["kernel"])
        assert first.device_class == repo.DeviceClassRecord(
            id=ids["dc"],
            key="NVIDIA H200",
            vendor="nvidia",
            name="NVIDIA H200",
            arch="sm_90",
            replay=False,
            limits=None,
        )
        assert (last.status, last.optuna_study_name) == (StudyStatus.DONE, "n2")
        assert (last.device_class.id, last.device_class.key) == (cpu, "cpu")
        assert last.device_class.limits == limits

    def test_device_class_by_key_and_get_environment(self, db: Database) -> None:
        ids = _setup(db)
        with db.session() as s:
            replay = repo.ensure_device_class(
                s, "replay:NVIDIA H200", "nvidia", "NVIDIA H200", "sm_90", replay=True
            )
        with db.session(readonly=True) as s:
            found = repo.device_class_by_key(s, "replay:NVIDIA H200")
            assert repo.device_class_by_key(s, "nvidia h200") is None
            env = repo.get_environment(s, ids["env"])
            with pytest.raises(NotFound, match="no environment"):
                repo.get_environment(s, ids["env"] + 100)
        assert found is not None
        assert (found.id, found.vendor, found.name, found.arch, found.replay) == (
            replay,
            "nvidia",
            "NVIDIA H200",
            "sm_90",
            True,
        )
        assert env == repo.EnvironmentRecord(
            id=ids["env"],
            device_class_id=ids["dc"],
            driver="560.35",
            runtime="12.6",
            triton_version="3.6.0",
            torch_version="2.9.0",
        )

    def test_upsert_best_keeps_only_the_fastest(self, db: Database) -> None:
        with db.session() as s:
            assert _best(s, 2.0, {"v": "first"}) is True
            assert _best(s, 3.0, {"v": "slower"}) is False
            assert _best(s, 2.0, {"v": "equal"}) is False
            assert _best(s, 5.0, {"v": "other"}, triton_minor="3.5") is True
        with db.session() as s:
            (stored,) = repo.get_best(s, "matmul", triton_minor="3.6")
            assert (stored.time_ms, stored.config) == (2.0, {"v": "first"})
            assert _best(s, 1.5, {"v": "faster"}) is True
        with db.session(readonly=True) as s:
            (stored,) = repo.get_best(
                s, "matmul", device_class_key="NVIDIA H200", triton_minor="3.6"
            )
            assert (stored.time_ms, stored.config) == (1.5, {"v": "faster"})
            assert len(repo.get_best(s, "matmul")) == 2
            assert repo.get_best(s, "matmul", problem_key='{"M":1}') == []
            (other,) = repo.get_best(s, "matmul", kernel_version="v1", triton_minor="3.5")
            assert (other.device_class_key, other.problem_key, other.time_ms) == (
                "NVIDIA H200",
                '{"M":64}',
                5.0,
            )

    def test_a_decided_upsert_replaces_the_row_it_was_timed_against_and_no_other(
        self, db: Database
    ) -> None:
        with db.session() as s:
            assert _best(s, 2.0, {"v": "incumbent"}) is True
            (stored,) = repo.get_best(s, "matmul")
            assert (stored.backend, stored.vendor, stored.noise) == (BestBackend.TRITON, None, None)
        vendor_win = repo.BestDecision(
            BestBackend.VENDOR, "torch.matmul", 2.1, 2.05, 3.0, 0.01, over=stored.updated_at
        )
        with db.session() as s:
            # Slower than the stored time, but decided against that very row: written.
            written = repo.upsert_best(
                s, **best_key(s), config={"v": "best triton"}, time_ms=2.05, trial_id=None,
                job_id=None, environment_id=None, decision=vendor_win,
            )  # fmt: skip
            assert written is True
        with db.session() as s:
            (now,) = repo.get_best(s, "matmul")
            assert (now.backend, now.vendor, now.time_ms, now.config) == (
                BestBackend.VENDOR, "torch.matmul", 2.05, {"v": "best triton"},
            )  # fmt: skip
            assert (now.triton_ms, now.vendor_ms, now.default_ms, now.noise) == (
                2.1, 2.05, 3.0, 0.01,
            )  # fmt: skip
            # Decided against the row as it was before: someone wrote it since, not written.
            assert not repo.upsert_best(
                s, **best_key(s), config={"v": "late"}, time_ms=2.5, trial_id=None, job_id=None,
                environment_id=None, decision=repo.BestDecision(over=stored.updated_at),
            )  # fmt: skip
        with pytest.raises(InvalidRecord, match="name its vendor path"), db.session() as s:
            repo.upsert_best(
                s, **best_key(s), config={}, time_ms=1.0, trial_id=None, job_id=None,
                environment_id=None, decision=repo.BestDecision(BestBackend.VENDOR),
            )  # fmt: skip

    def test_vendor_trials_round_trip_and_the_newest_ok_per_path_answers(
        self, db: Database
    ) -> None:
        ids = _setup(db)
        key = {"kernel_name": "matmul", "problem_key": '{"M":64}', "device_class_id": ids["dc"]}

        def row(vendor: str, outcome: str, median: float | None, **extra: Any) -> Any:
            return {
                **key, "vendor": vendor, "outcome": outcome, "median_ms": median,
                "samples_ms": None if median is None else [median], "job_id": ids["job"],
                "study_id": ids["study"], "environment_id": ids["env"], **extra,
            }  # fmt: skip

        with db.session() as s:
            written = repo.record_vendor_trials(
                s,
                [
                    row("torch.matmul", "ok", 2.0),
                    row("torch.matmul", "ok", 1.9),
                    row("cublaslt", "compile_error", None, error="RuntimeError: no"),
                    row("torch.matmul", "ok", 9.0, objective=Objective.GRAPH),
                    row("torch.matmul", "ok", 8.0, environment_id=None),
                ],
            )
            assert len(written) == 5 and written == sorted(written)
        with db.session(readonly=True) as s:
            found = repo.measured_vendor(s, "matmul", '{"M":64}', ids["dc"], ids["env"])
            assert list(found) == ["torch.matmul"] and found["torch.matmul"].median_ms == 1.9
            graph = repo.measured_vendor(
                s, "matmul", '{"M":64}', ids["dc"], ids["env"], Objective.GRAPH
            )
            assert graph["torch.matmul"].median_ms == 9.0
            assert (
                repo.measured_vendor(s, "matmul", '{"M":64}', ids["dc"], None)[
                    "torch.matmul"
                ].median_ms
                == 8.0
            )
            assert repo.measured_vendor(s, "rmsnorm", '{"M":64}', ids["dc"], ids["env"]) == {}
            mine = repo.vendor_trials_for_study(s, ids["study"])
            assert [(v.vendor, v.outcome) for v in mine][2] == (
                "cublaslt",
                TrialOutcome.COMPILE_ERROR,
            )
            assert mine[2].error == "RuntimeError: no" and mine[0].samples_ms == [2.0]
        for bad, message in [
            ({"outcome": "meh"}, "unknown trial outcome"),
            ({"vendor": ""}, "needs vendor"),
            ({"samples_ms": [math.inf]}, "finite"),
        ]:
            with pytest.raises(InvalidRecord, match=message), db.session() as s:
                repo.record_vendor_trials(s, [{**row("torch.matmul", "ok", 1.0), **bad}])

    def test_revalidation_marks_a_best_until_a_retune_replaces_it(self, db: Database) -> None:
        ids = _setup(db)
        with db.session() as s:
            _best(s, 2.0, {"v": "stored"})
            (row,) = repo.get_best(s, "matmul")
            assert (row.revalidation, row.revalidated_ms, row.stale) == (None, None, False)
            written = row.updated_at
            repo.mark_revalidation(s, row.id, RevalidationState.REGRESSED, 3.0, ids["env"])
        with db.session() as s:
            (row,) = repo.get_best(s, "matmul")
            assert (row.revalidation, row.revalidated_ms, row.stale) == (
                RevalidationState.REGRESSED,
                3.0,
                True,
            )
            assert row.revalidated_environment_id == ids["env"]
            assert row.revalidated_at is not None and row.updated_at >= written  # caches see it
            # Slower than the stored 2.0 but faster than the 3.0 it takes now: it replaces it.
            assert _best(s, 3.5, {"v": "slower than now"}) is False
            assert _best(s, 2.5, {"v": "retuned"}) is True
        with db.session() as s:
            (row,) = repo.get_best(s, "matmul")
            assert (row.config, row.time_ms, row.revalidation, row.revalidated_at) == (
                {"v": "retuned"},
                2.5,
                None,
                None,
            )
            assert _best(s, 2.6, {"v": "slower"}) is False  # no longer marked: the usual rule
            repo.mark_revalidation(s, row.id, RevalidationState.FAILED, None, None)
            assert _best(s, 9.0, {"v": "runs"}) is True  # a failed best: anything that runs
            repo.mark_revalidation(s, row.id, RevalidationState.HOLDS, 9.1, None)
            assert _best(s, 9.5, {"v": "slower"}) is False  # it holds: the usual rule
            with pytest.raises(NotFound):
                repo.mark_revalidation(s, row.id + 100, RevalidationState.HOLDS, 1.0, None)
            with pytest.raises(InvalidRecord, match="finite positive"):
                repo.mark_revalidation(s, row.id, RevalidationState.HOLDS, math.nan, None)
        with pytest.raises(ConstraintViolation), db.session() as s:
            s.execute(sa.text("UPDATE tf_best_configs SET revalidation = 'stale'"))

    def test_best_rows_are_keyed_by_their_device_class_row(self, db: Database) -> None:
        mi300 = "AMD Instinct MI300X"
        with db.session() as s:
            h200 = repo.ensure_device_class(s, CLASS_KEY, "nvidia", CLASS_KEY, "sm_90")
            amd = repo.ensure_device_class(s, mi300, "amd", mi300, "gfx942")
            assert _best(s, 2.0, {"v": "h200"}, device_class_id=h200) is True
            # Another class is another key: written though slower.
            assert _best(s, 3.0, {"v": "mi300"}, device_class_id=amd) is True
            assert _best(s, 2.5, {"v": "slower"}, device_class_id=h200) is False
        with db.session(readonly=True) as s:
            rows = repo.get_best(s, "matmul")  # in the order of the classes' keys
            assert [(b.device_class_key, b.device_class_id, b.config) for b in rows] == [
                (mi300, amd, {"v": "mi300"}),
                (CLASS_KEY, h200, {"v": "h200"}),
            ]
            (only,) = repo.get_best(s, "matmul", device_class_key=mi300)
            assert (only.device_class_id, only.time_ms) == (amd, 3.0)
            assert repo.get_best(s, "matmul", device_class_key=mi300.lower()) == []
        with pytest.raises(ConstraintViolation), db.session() as s:
            _best(s, 1.0, {}, device_class_id=h200 + amd + 100)  # no such class
        with db.session(readonly=True) as s:
            assert len(repo.get_best(s, "matmul")) == 2

    def test_upgrade_to_0008_keys_best_rows_by_their_class_and_back(self, empty_url: str) -> None:
        """Rows of 0007 keyed by a class key: one of a stored class takes its id, one whose key
        names no class gets a class of that key first; downgrade writes the keys back."""
        database = Database(empty_url)
        best = (
            "INSERT INTO tf_best_configs (kernel_name, kernel_version, problem_key, "
            "device_class_key, triton_minor, objective, config, time_ms, updated_at, backend) "
            "VALUES ('matmul', 'v1', :problem, :cls, '3.6', 'kernel', '{}', 2.0, "
            "CURRENT_TIMESTAMP, 'triton')"
        )
        keyed = {("p1", CLASS_KEY), ("p2", CLASS_KEY), ("p1", "replay:NVIDIA H100"), ("p1", "x")}
        try:
            _migrate(database, "0007")
            with database.engine.begin() as conn:
                conn.execute(
                    sa.text(
                        "INSERT INTO tf_device_classes (id, key, vendor, name, arch, replay) "
                        "VALUES (7, :cls, 'nvidia', :cls, 'sm_90', false)"
                    ),
                    {"cls": CLASS_KEY},
                )
                for problem, cls in sorted(keyed):
                    conn.execute(sa.text(best), {"problem": problem, "cls": cls})
            _migrate(database, "0008")  # the schema at 0009 is compared to the models below
            with database.session() as s:
                rows = repo.get_best(s, "matmul")
                assert {(b.problem_key, b.device_class_key) for b in rows} == keyed
                assert {b.device_class_id for b in rows if b.device_class_key == CLASS_KEY} == {7}
                replay = repo.device_class_by_key(s, "replay:NVIDIA H100")
                other = repo.device_class_by_key(s, "x")
                assert replay is not None and other is not None
                assert (replay.name, replay.vendor, replay.arch, replay.replay) == (
                    "replay:NVIDIA H100", "", "", True,
                )  # fmt: skip
                assert (other.name, other.replay) == ("x", False)
                # The new key: the same (kernel, version, problem, class, minor) is one row.
                assert repo.upsert_best(s, "matmul", "v1", "p1", 7, "3.6", {"v": 1}, 1.0,
                                        None, None, None)  # fmt: skip
                assert len(repo.get_best(s, "matmul")) == 4
            _migrate(database, "0007", down=True)
            with database.engine.connect() as conn:
                columns = {c["name"] for c in sa.inspect(conn).get_columns("tf_best_configs")}
                assert "device_class_id" not in columns
                back = conn.execute(
                    sa.text("SELECT problem_key, device_class_key, time_ms FROM tf_best_configs")
                ).all()
            assert {(p, c) for p, c, _ in back} == keyed
            assert {ms for p, c, ms in back if (p, c) == ("p1", CLASS_KEY)} == {1.0}
            with pytest.raises(sa.exc.IntegrityError), database.engine.begin() as conn:
                conn.execute(sa.text(best), {"problem": "p2", "cls": CLASS_KEY})  # key restored
            database.upgrade()
            with database.session(readonly=True) as s:
                rows = repo.get_best(s, "matmul")
                assert {(b.problem_key, b.device_class_key) for b in rows} == keyed
                assert {b.device_class_id for b in rows if b.device_class_key == CLASS_KEY} == {7}
                assert repo.device_class_by_key(s, "x") == other  # no second class of a key
        finally:
            database.close()

    def test_0007_to_0009_and_back_keeps_best_rows_and_drops_the_drift_tables(
        self, empty_url: str
    ) -> None:
        """0009 stacks on 0008: a best row of 0007 keeps its class through 0008 and 0009, takes
        re-timings, stack marks and job kinds there; down to 0008 the drift tables, the kind
        column and the revalidation jobs go, the best row stays keyed by its class id; down to
        0007 its key comes back; up to the head again, the tuning job reads as one."""
        database = Database(empty_url)
        try:
            _migrate(database, "0007")
            with database.engine.begin() as conn:
                conn.execute(
                    sa.text(
                        "INSERT INTO tf_device_classes (id, key, vendor, name, arch, replay) "
                        "VALUES (7, :cls, 'nvidia', :cls, 'sm_90', false)"
                    ),
                    {"cls": CLASS_KEY},
                )
                conn.execute(
                    sa.text(
                        "INSERT INTO tf_best_configs (kernel_name, kernel_version, problem_key, "
                        "device_class_key, triton_minor, objective, config, time_ms, "
                        "updated_at, backend) VALUES ('matmul', 'v1', 'p1', :cls, '3.6', "
                        "'kernel', '{}', 2.0, CURRENT_TIMESTAMP, 'triton')"
                    ),
                    {"cls": CLASS_KEY},
                )
            _migrate(database, "0008")
            _migrate(database, "0009")
            database.check_schema()
            with database.engine.connect() as conn:
                context = MigrationContext.configure(
                    conn, opts={"compare_type": True, "version_table": VERSION_TABLE}
                )
                assert compare_metadata(context, Base.metadata) == []
            with database.session() as s:
                (best,) = repo.get_best(s, "matmul")
                assert (best.device_class_id, best.device_class_key) == (7, CLASS_KEY)
                env = repo.ensure_environment(s, 7, "d", "cuda 12.8", "3.6.0", "2.9.0")
                kernel = repo.ensure_kernel(s, "matmul", "v1", "s1")
                tune = repo.create_job(s, kernel, {"kernel": "matmul"}, "ml")
                check = repo.create_job(s, kernel, {}, "ml", kind=JobKind.REVALIDATE)
                repo.record_retiming(
                    s, best.id, RevalidationState.HOLDS, 2.0, 2.1, job_id=check, environment_id=env
                )
                assert repo.mark_stack(s, 7, env) is True
                (drift,) = repo.drift_by_class(s)
                assert (drift.device_class, drift.retimings) == (CLASS_KEY, {"holds": 1})
            _migrate(database, "0008", down=True)
            with database.engine.connect() as conn:
                inspector = sa.inspect(conn)
                assert not {"tf_retimings", "tf_stack_marks"} & set(inspector.get_table_names())
                assert "kind" not in {c["name"] for c in inspector.get_columns("tf_jobs")}
                assert conn.scalars(sa.text("SELECT id FROM tf_jobs")).all() == [tune]
                assert conn.execute(
                    sa.text("SELECT device_class_id, time_ms FROM tf_best_configs")
                ).all() == [(7, 2.0)]
            _migrate(database, "0007", down=True)
            with database.engine.connect() as conn:
                assert conn.execute(
                    sa.text("SELECT device_class_key, time_ms FROM tf_best_configs")
                ).all() == [(CLASS_KEY, 2.0)]
            database.upgrade()
            assert database.current_revision() == HEAD
            with database.session(readonly=True) as s:
                assert repo.get_job(s, tune).kind is JobKind.TUNE
                assert repo.retimings(s, best.id) == []
                assert [b.device_class_id for b in repo.get_best(s, "matmul")] == [7]
        finally:
            database.close()

    @pytest.mark.parametrize("bad", [math.nan, math.inf, 0.0, -1.0])
    def test_upsert_best_rejects_bad_times(self, db: Database, bad: float) -> None:
        with pytest.raises(InvalidRecord, match="finite positive"), db.session() as s:
            _best(s, bad, {})

    def test_upsert_best_is_one_atomic_statement(self, db: Database) -> None:
        statements = []
        with db.session() as s:
            key = best_key(s)

            def capture(conn: Connection, cursor: Any, statement: str, *_: Any) -> None:
                statements.append(statement)

            sa.event.listen(db.engine, "before_cursor_execute", capture)
            try:
                _best(s, 1.0, {}, **key)
                _best(s, 0.5, {}, **key)
            finally:
                sa.event.remove(db.engine, "before_cursor_execute", capture)
        assert len(statements) == 2
        for statement in statements:
            flat = " ".join(statement.upper().split())
            assert flat.startswith("INSERT INTO TF_BEST_CONFIGS")
            assert "ON CONFLICT (KERNEL_NAME, KERNEL_VERSION, PROBLEM_KEY, DEVICE_CLASS_ID" in flat
            assert "DO UPDATE SET" in flat
            assert "WHERE TF_BEST_CONFIGS.TIME_MS > EXCLUDED.TIME_MS" in flat

    def test_upsert_best_keeps_fastest_under_concurrent_processes(self, empty_url: str) -> None:
        setup = Database(empty_url)
        setup.upgrade()
        setup.close()
        workers, per_worker = 4, 40
        pool = [0.001 * (i + 1) for i in range(workers * per_worker)]
        # Each worker goes from slow to fast over interleaved times, so nearly every attempt is a
        # candidate improvement racing the others'.
        descending = sorted(pool, reverse=True)
        chunks = [descending[w::workers] for w in range(workers)]
        ctx = multiprocessing.get_context("spawn")
        start, out = ctx.Barrier(workers), ctx.Queue()
        procs = [
            ctx.Process(
                target=hammer,
                args=(empty_url, w, chunks[w], start, out),
            )
            for w in range(workers)
        ]
        for p in procs:
            p.start()
        results: dict[int, list[tuple[float, bool, float]]] = {}
        deadline = time.monotonic() + 120
        while len(results) < workers:
            try:
                w, rows = out.get(timeout=0.2)
                results[w] = rows
            except queue.Empty:
                failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                assert not failed, f"writer processes died with exit codes {failed}"
                assert time.monotonic() < deadline, "writer processes did not finish in 120 s"
        for p in procs:
            p.join(timeout=30)
            assert p.exitcode == 0
        attempts = [r for w in range(workers) for r in results[w]]
        assert len(attempts) == len(pool)
        database = Database(empty_url)
        try:
            with database.session(readonly=True) as s:
                (stored,) = repo.get_best(s, KEY["kernel_name"])
        finally:
            database.close()
        assert stored.time_ms == min(pool)
        assert stored.config["t"] == stored.time_ms
        assert {t: won for t, won, _ in attempts}[min(pool)] is True
        # Every time ever seen stored was an attempt that returned True, and only those.
        assert {seen for _, _, seen in attempts} <= {t for t, won, _ in attempts if won}
        for w in range(workers):
            # The stored time never rises, and after any attempt it is at most the attempted time
            # (a lost update, e.g. a read-then-write upsert, breaks this).
            seen_before, own_best = math.inf, math.inf
            for t, won, seen in results[w]:
                assert seen <= min(t, seen_before)
                if t >= own_best:
                    assert won is False
                if won:
                    own_best = t
                seen_before = seen

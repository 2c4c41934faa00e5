"""Existing databases with rows, at revision 0001, 0002 or 0004, upgraded by the ``tunefleet db upgrade``
command a user runs (a subprocess), on every backend; then downgraded where the rows allow it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from db import Database, JobStatus, Objective, SchemaOutOfDate
from db import repository as repo
from db.states import RevalidationState

HEAD = "0009"
ROOT = Path(__file__).resolve().parents[2]

# Rows every older database with results has: a kernel, a device class, a job, an ok trial that a
# best config refers to, and a crashed trial.
ROWS_0001 = (
    "INSERT INTO tf_device_classes (id, key, vendor, name, arch, replay) VALUES "
    "(1, 'cpu', 'cpu', 'cpu', 'interpreter', false)",
    "INSERT INTO tf_kernels (id, name, version_hash, space_hash) VALUES (1, 'matmul', 'v1', 's1')",
    "INSERT INTO tf_jobs (id, kernel_id, status, spec, team, created_at, cancel_requested) "
    "VALUES (1, 1, 'done', '{}', 'ml', CURRENT_TIMESTAMP, false)",
    "INSERT INTO tf_trials (id, job_id, kernel_id, problem_key, device_class_id, config, "
    "config_key, outcome, median_ms, reused, created_at) VALUES (1, 1, 1, 'p', 1, '{}', 'ok', "
    "'ok', 2.0, false, CURRENT_TIMESTAMP)",
    "INSERT INTO tf_trials (id, job_id, kernel_id, problem_key, device_class_id, config, "
    "config_key, outcome, reused, created_at) VALUES (2, 1, 1, 'p', 1, '{}', 'crashed', "
    "'crash', false, CURRENT_TIMESTAMP)",
    "INSERT INTO tf_best_configs (kernel_name, kernel_version, problem_key, device_class_key, "
    "triton_minor, config, time_ms, trial_id, job_id, updated_at) VALUES ('matmul', 'v1', 'p', "
    "'cpu', '3.6', '{}', 2.0, 1, 1, CURRENT_TIMESTAMP)",
)


def _migrate(database: Database, revision: str, down: bool = False) -> None:
    config = database._alembic_config()
    with database.engine.connect() as conn, conn.begin():
        config.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(config, revision)


def _database_at(url: str, revision: str) -> Database:
    database = Database(url)
    _migrate(database, revision)
    with database.engine.begin() as conn:
        for statement in ROWS_0001:
            conn.execute(sa.text(statement))
    return database


def _upgrade_command(url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "db", "upgrade", "--db", url],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


def _check_rows_survived(database: Database) -> None:
    with database.session(readonly=True) as s:
        job = repo.get_job(s, 1)
        assert (job.status, job.team, job.priority, job.lease_owner) == (
            JobStatus.DONE,
            "ml",
            0,
            None,
        )
        (best,) = repo.get_best(s, "matmul")
        assert (best.time_ms, best.trial_id, best.job_id, best.team) == (2.0, 1, 1, "ml")
        assert (best.device_class_id, best.device_class_key) == (1, "cpu")
        ok = repo.find_measured(s, 1, "p", 1, "ok")
        assert ok is not None and ok.median_ms == 2.0 and not ok.provisional
        # A crash stored before 0003 is no longer taken for the config's own verdict.
        assert repo.find_measured(s, 1, "p", 1, "crashed") is None
        assert repo.list_tokens(s) == [] and repo.list_audit(s) == []


@pytest.mark.parametrize("start", ["0001", "0002"])
def test_db_upgrade_command_migrates_an_existing_database(empty_url: str, start: str) -> None:
    database = _database_at(empty_url, start)
    try:
        with pytest.raises(SchemaOutOfDate, match=f"revision {start}, behind {HEAD}"):
            database.check_schema()
        done = _upgrade_command(empty_url)
        assert done.returncode == 0, done.stderr
        assert f"upgraded from revision {start} to {HEAD}" in done.stdout
        assert database.current_revision() == HEAD
        database.check_schema()
        _check_rows_survived(database)
        with database.session() as s:
            record, token = repo.create_token(s, "ml", "read")
            repo.write_audit(s, action="token.create", token_id=record.id)
        again = _upgrade_command(empty_url)
        assert again.returncode == 0 and f"already at the newest schema ({HEAD})" in again.stdout
        # Down again: 0003's tables and columns go, the rows of the older schema stay.
        _migrate(database, start, down=True)
        assert database.current_revision() == start
        with database.engine.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
            columns = {c["name"] for c in sa.inspect(conn).get_columns("tf_jobs")}
            assert conn.scalar(sa.text("SELECT count(*) FROM tf_trials")) == 2
        assert not {"tf_tokens", "tf_audit"} & tables
        assert "lease_owner" not in columns and "priority" not in columns
        assert _upgrade_command(empty_url).returncode == 0
        with database.session(readonly=True) as s:
            assert repo.verify_token(s, token) is None  # the downgrade dropped it
            assert repo.get_best(s, "matmul", objective=Objective.KERNEL)[0].team == "ml"
    finally:
        database.close()


def test_db_upgrade_command_creates_an_empty_database(empty_url: str) -> None:
    done = _upgrade_command(empty_url)
    assert done.returncode == 0, done.stderr
    assert f"created at the newest schema ({HEAD})" in done.stdout
    database = Database(empty_url)
    try:
        assert database.current_revision() == HEAD
    finally:
        database.close()


def test_db_upgrade_from_0004_leaves_best_configs_unmarked_then_marks_them(
    empty_url: str,
) -> None:
    database = _database_at(empty_url, "0004")
    try:
        done = _upgrade_command(empty_url)
        assert done.returncode == 0, done.stderr
        assert f"upgraded from revision 0004 to {HEAD}" in done.stdout
        with database.session() as s:
            (best,) = repo.get_best(s, "matmul")
            assert (best.time_ms, best.trial_id, best.job_id, best.team) == (2.0, 1, 1, "ml")
            assert (best.revalidation, best.revalidated_at, best.revalidated_ms) == (None,) * 3
            repo.mark_revalidation(s, best.id, RevalidationState.REGRESSED, 2.5, None)
        with database.session(readonly=True) as s:
            (best,) = repo.get_best(s, "matmul")
            assert (best.revalidation, best.revalidated_ms) == (RevalidationState.REGRESSED, 2.5)
        _migrate(database, "0004", down=True)  # the marks go, the row stays
        with database.engine.connect() as conn:
            columns = {c["name"] for c in sa.inspect(conn).get_columns("tf_best_configs")}
            assert conn.scalar(sa.text("SELECT time_ms FROM tf_best_configs")) == 2.0
        assert not {c for c in columns if c.startswith("revalidat")}
        assert _upgrade_command(empty_url).returncode == 0
        with database.session(readonly=True) as s:
            assert repo.get_best(s, "matmul")[0].revalidation is None
    finally:
        database.close()

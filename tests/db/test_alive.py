"""The database checked as a job runs: a SQLite file deleted, replaced or made read-only is noticed
(DatabaseLost, nothing written elsewhere), and transient errors are retried with backoff."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from db import Database, DatabaseLost, TransientDatabaseError
from db import repository as repo
from db import session as db_session


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 't.db'}")
    database.upgrade()
    with database.session() as s:
        repo.ensure_kernel(s, "matmul", "v1", "s1")
    return database


def _kernels(s: Session) -> int:
    return len(list(s.execute(sa.text("SELECT id FROM tf_kernels"))))


def test_deleted_sqlite_file_is_noticed_and_not_recreated(sqlite_db: Database) -> None:
    path = Path(str(sqlite_db.engine.url.database))
    sqlite_db.check_alive()
    path.unlink()
    with pytest.raises(DatabaseLost, match=r"was deleted while in use") as info:
        sqlite_db.check_alive()
    assert "\n" not in str(info.value)
    with pytest.raises(DatabaseLost), sqlite_db.session() as s:
        repo.ensure_kernel(s, "rmsnorm", "v1", "s1")
    assert not path.exists()  # no empty database was created in its place


def test_write_to_a_file_deleted_during_the_transaction_is_not_confirmed(
    sqlite_db: Database,
) -> None:
    path = Path(str(sqlite_db.engine.url.database))
    with pytest.raises(DatabaseLost, match="deleted"), sqlite_db.session() as s:
        repo.ensure_kernel(s, "rmsnorm", "v1", "s1")
        path.unlink()


def test_replaced_sqlite_file_is_noticed(sqlite_db: Database, tmp_path: Path) -> None:
    path = Path(str(sqlite_db.engine.url.database))
    other = Database(f"sqlite:///{tmp_path / 'other.db'}")
    other.upgrade()
    other.close()
    os.replace(tmp_path / "other.db", path)
    with pytest.raises(DatabaseLost, match="replaced by another file"):
        sqlite_db.check_alive()


def test_read_only_sqlite_file_is_noticed(sqlite_db: Database) -> None:
    path = Path(str(sqlite_db.engine.url.database))
    path.chmod(0o444)
    try:
        with pytest.raises(DatabaseLost, match=r"is read-only, .*chmod u\+w"):
            sqlite_db.check_alive()
        with pytest.raises(DatabaseLost), sqlite_db.session() as s:
            repo.ensure_kernel(s, "rmsnorm", "v1", "s1")
        with sqlite_db.session(readonly=True) as s:  # reading a read-only file is fine
            assert _kernels(s) == 1
    finally:
        path.chmod(0o644)
    sqlite_db.check_alive()
    with sqlite_db.session(readonly=True) as s:
        assert _kernels(s) == 1


def test_sqlite_lock_held_past_the_busy_timeout_is_retried(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    Database(url).upgrade()
    database = Database(url, busy_timeout_s=0.1)
    holder = sqlite3.connect(tmp_path / "t.db", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    released = threading.Timer(0.6, holder.execute, args=("COMMIT",))
    released.start()
    try:
        with (
            pytest.raises(
                TransientDatabaseError,
                match=r"stayed locked by another writer \(waited 0\.\d s of the 0\.1 s allowed\)",
            ),
            database.session() as s,
        ):
            repo.ensure_kernel(s, "matmul", "v1", "s1")
        calls: list[float] = []

        def write(s: Session) -> int:
            calls.append(time.monotonic())
            return repo.ensure_kernel(s, "matmul", "v1", "s1")

        database.run_with_retry(write, backoff_s=0.1)
    finally:
        released.join()
        holder.close()
    assert len(calls) >= 2  # the first attempts met the lock, a later one got through
    with database.session(readonly=True) as s:
        assert _kernels(s) == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"])
def test_postgresql_connection_killed_inside_a_transaction_is_retried(
    empty_url: str, pg_admin: Engine
) -> None:
    database = Database(empty_url)
    database.upgrade()
    attempts: list[int] = []

    def write(s: Session) -> int:
        kernel = repo.ensure_kernel(s, "matmul", "v1", "s1")
        pid = s.scalar(sa.text("SELECT pg_backend_pid()"))
        attempts.append(int(pid or 0))
        if len(attempts) == 1:  # kill this transaction's backend between two writes
            with pg_admin.connect() as admin:
                admin.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        repo.ensure_kernel(s, "rmsnorm", "v1", "s1")
        return kernel

    try:
        with (
            pytest.raises(TransientDatabaseError, match="lost PostgreSQL"),
            database.session() as s,
        ):
            pid = s.scalar(sa.text("SELECT pg_backend_pid()"))
            with pg_admin.connect() as admin:
                admin.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            repo.ensure_kernel(s, "matmul", "v1", "s1")
        database.run_with_retry(write, backoff_s=0.05)
        assert len(attempts) == 2 and attempts[0] != attempts[1]
        with database.session(readonly=True) as s:
            assert _kernels(s) == 2  # each written once: the killed attempt left nothing
        database.check_alive()
    finally:
        database.close()


def _backend_gone(pg_admin: Engine, pid: int) -> None:
    """Wait until PostgreSQL's backend ``pid`` has exited (pg_terminate_backend only signals)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with pg_admin.connect() as admin:
            found = admin.execute(
                sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
            ).scalar()
        if not found:
            return
        time.sleep(0.05)
    pytest.fail(f"backend {pid} did not exit")


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"])
@pytest.mark.parametrize("ping_idle_s", [600.0, 0.0])
def test_a_pooled_postgresql_connection_whose_backend_was_terminated_is_replaced_before_use(
    empty_url: str, pg_admin: Engine, monkeypatch: pytest.MonkeyPatch, ping_idle_s: float
) -> None:
    """A plain session (no retry) after the backend of the pooled connection it would get was
    terminated: the pool sees from the connection's socket that the server ended it and opens
    another, so the session's reads and writes work; with every pooled connection pinged
    (``PG_PING_IDLE_S`` 0), the ping leaves the session's transaction as it was."""
    monkeypatch.setattr(db_session, "PG_PING_IDLE_S", ping_idle_s)
    database = Database(empty_url)
    database.upgrade()
    try:
        for _ in range(3):
            with database.session(readonly=True) as s:
                pid = int(s.scalar(sa.text("SELECT pg_backend_pid()")) or 0)
            with pg_admin.connect() as admin:
                admin.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            _backend_gone(pg_admin, pid)
            with database.session() as s:
                assert int(s.scalar(sa.text("SELECT pg_backend_pid()")) or 0) != pid
                repo.ensure_kernel(s, "matmul", "v1", "s1")
        with database.session(readonly=True) as s:
            assert _kernels(s) == 1
    finally:
        database.close()

"""URL handling, SQLite connection settings and the import boundary of the db package."""

from __future__ import annotations

import re
import secrets
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from db import (
    Database,
    DatabaseError,
    DatabaseUnavailable,
    DatabaseURLError,
    SchemaOutOfDate,
    TransientDatabaseError,
    default_url,
    repository,
)
from db.session import BUSY_TIMEOUT_S, declared_head
from tests.conftest import PG_URL


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("nonsense", "malformed database URL 'nonsense'"),
        ("mysql://x", "unsupported database 'mysql'"),
        ("postgresql+psycopg2://u@h/d", "unsupported database 'postgresql\\+psycopg2'"),
        ("sqlite://", "names no file"),
    ],
)
def test_bad_url_is_refused_in_one_line(url: str, match: str) -> None:
    with pytest.raises(DatabaseURLError, match=match) as info:
        Database(url)
    assert "\n" not in str(info.value)
    assert "sqlite:///PATH" in str(info.value)


def test_unreachable_postgresql_says_where_and_what_to_do() -> None:
    database = Database("postgresql+psycopg://postgres@127.0.0.1:5999/test")
    with pytest.raises(DatabaseUnavailable) as info:
        database.check_schema()
    assert str(info.value) == (
        "cannot reach PostgreSQL at 127.0.0.1:5999: connection refused; check --db or TUNEFLEET_DB"
    )
    with pytest.raises(DatabaseUnavailable, match=re.escape("127.0.0.1:5999")), database.session():
        pass


@pytest.fixture
def one_connection_url(pg_admin: sa.Engine) -> Iterator[str]:
    """The test PostgreSQL as a role allowed one connection at a time (what a server whose
    connection slots are all taken answers is the same: SQLSTATE 53300)."""
    role = f"tf_one_{secrets.token_hex(4)}"
    with pg_admin.connect() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1"))
    try:
        yield sa.make_url(PG_URL).set(username=role).render_as_string(hide_password=False)
    finally:
        with pg_admin.connect() as conn:
            conn.execute(sa.text(f"DROP ROLE {role}"))


@pytest.mark.postgres
def test_a_full_server_is_waited_for_then_named(one_connection_url: str) -> None:
    """A connection PostgreSQL refuses for now is tried again (nothing was sent), up to
    ``connect_wait_s``; then the error says what to change."""
    holder = Database(one_connection_url)
    waiter = Database(one_connection_url, connect_wait_s=20)
    try:
        with holder.session(readonly=True) as s:
            s.execute(sa.text("SELECT 1"))
            threading.Timer(1.0, s.connection().invalidate).start()  # frees the slot in 1 s
            t0 = time.monotonic()
            with waiter.session(readonly=True) as other:
                assert other.execute(sa.text("SELECT 1")).scalar() == 1
            assert time.monotonic() - t0 >= 0.9
        waiter.close()
        impatient = Database(one_connection_url, connect_wait_s=0.5)
        with holder.session(readonly=True) as s:
            s.execute(sa.text("SELECT 1"))
            with pytest.raises(TransientDatabaseError) as info, impatient.session():
                pass
        assert "refused new connections for 0.5 s" in str(info.value)
        assert "max_connections or run fewer servers" in str(info.value)
        impatient.close()
    finally:
        holder.close()
        waiter.close()


def test_unopenable_sqlite_file(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    with pytest.raises(
        DatabaseUnavailable, match=r"cannot open SQLite file .*missing/x\.db"
    ) as info:
        database.upgrade()
    assert "\n" not in str(info.value)


def test_default_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEFLEET_DB", "postgresql+psycopg://team@db:5432/tune")
    assert default_url() == "postgresql+psycopg://team@db:5432/tune"
    monkeypatch.delenv("TUNEFLEET_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    url = default_url()
    assert url == f"sqlite:///{tmp_path / 'tunefleet' / 'tunefleet.db'}"
    assert (tmp_path / "tunefleet").is_dir()
    assert Database().backend == "sqlite"


def test_sqlite_connection_settings(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 't.db'}")
    try:
        with database.engine.connect() as conn:
            pragmas = {
                name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "foreign_keys", "busy_timeout")
            }
        assert pragmas == {
            "journal_mode": "wal",
            "foreign_keys": 1,
            "busy_timeout": int(BUSY_TIMEOUT_S * 1000),
        }
    finally:
        database.close()


def test_sqlite_writers_take_the_lock_up_front_and_readers_do_not(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    database = Database(f"sqlite:///{path}")
    database.upgrade()
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with database.session(readonly=True) as s:
            s.execute(sa.text("SELECT count(*) FROM tf_jobs"))
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        with database.session() as s:
            s.execute(sa.text("SELECT count(*) FROM tf_jobs"))
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
    finally:
        other.close()
        database.close()


def test_a_write_in_a_read_only_session_fails_every_time(db: Database) -> None:
    # Not only while another writer holds the lock (on SQLite a read transaction cannot wait
    # for it): the same code fails on both backends, and the pooled connection writes again.
    with pytest.raises(DatabaseError, match=r"read-?only"), db.session(readonly=True) as s:
        repository.ensure_kernel(s, "matmul", "v1", "s1")
    with db.session() as s:
        repository.ensure_kernel(s, "matmul", "v1", "s1")
    with db.session(readonly=True) as s:
        assert s.execute(sa.text("SELECT count(*) FROM tf_kernels")).scalar() == 1


def test_importing_db_loads_no_gpu_or_search_library() -> None:
    heavy = ("torch", "triton", "ray", "optuna", "orchestrator", "workers", "search_spaces")
    code = (
        "import sys, db, db.repository, db.session, db.models\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path.cwd()
    )
    assert result.stdout.strip() == "[]"


def test_the_head_the_migration_files_declare_is_alembics(tmp_path: Path) -> None:
    """``declared_head`` (read as text) names the revision Alembic migrates to, so a database
    at it is checked without Alembic; one behind still goes through Alembic and is refused."""
    database = Database(f"sqlite:///{tmp_path}/head.db")
    assert declared_head() == database._head()
    database.upgrade()
    code = (
        "import sys\nfrom db import Database\n"
        f"Database({database.url!r}).ensure_schema()\nprint('alembic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    with database.engine.begin() as conn:
        conn.execute(sa.text("UPDATE tf_alembic_version SET version_num = '0001'"))
    with pytest.raises(SchemaOutOfDate, match="behind"):
        database.check_schema()

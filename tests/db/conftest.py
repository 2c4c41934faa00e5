"""Backend fixtures: every test of tests/db/test_storage.py runs on SQLite and on PostgreSQL.

PostgreSQL tests get a fresh schema each (``search_path`` set through the URL's ``options``), dropped
afterwards. Without a reachable server they are skipped, except under CI where they fail.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from db import Database

PG_URL = os.environ.get("TUNEFLEET_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[Engine]:
    """An autocommit engine on the test PostgreSQL server, or skip (fail under CI) without one."""
    engine = Database(PG_URL).engine.execution_options(isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as e:
        reason = f"PostgreSQL at {PG_URL} unreachable ({str(e.orig).splitlines()[0]})"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must run the postgres tests")
        pytest.skip(f"{reason}; set TUNEFLEET_TEST_PG")
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def empty_url(
    backend: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[str]:
    """URL of an empty database of ``backend`` that only this test sees."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'tunefleet.db'}"
        return
    admin: Engine = request.getfixturevalue("pg_admin")
    schema = f"t_{secrets.token_hex(6)}"
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    url = sa.make_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))


@pytest.fixture
def db(empty_url: str) -> Iterator[Database]:
    """A migrated database of ``backend``."""
    database = Database(empty_url)
    database.upgrade()
    yield database
    database.close()

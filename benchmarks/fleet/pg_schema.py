"""A fresh PostgreSQL schema on the test server for one benchmark run."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

PG_URL = os.environ.get("TUNEFLEET_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
#: The catalogs a created and dropped schema leaves dead rows in.
CATALOGS = ("pg_attribute", "pg_class", "pg_depend", "pg_type", "pg_index", "pg_constraint")


@contextmanager
def fresh_schema(prefix: str, *, keep: bool = False) -> Iterator[tuple[str, str]]:
    """``(schema, url)`` of a new schema ``<prefix>_<random>`` (the URL sets its search_path);
    dropped when the block ends unless ``keep``. The system catalogs are vacuumed first: with
    autovacuum off (as on the CI machine) the dead rows of earlier runs' schemas pile up there
    and slow every run after them."""
    schema = f"{prefix}_{secrets.token_hex(4)}"
    admin = sa.create_engine(sa.make_url(PG_URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"VACUUM {', '.join(f'pg_catalog.{c}' for c in CATALOGS)}"))
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    url = sa.make_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield schema, url.render_as_string(hide_password=False)
    finally:
        if not keep:
            with admin.connect() as conn:
                conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()

"""Alembic environment for tunefleet.

Run only through :meth:`db.session.Database.upgrade`, which passes an open connection (already inside
a transaction) in ``config.attributes["connection"]``; there is no alembic.ini and no offline mode.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from db.models import Base
from db.session import VERSION_TABLE

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError("tunefleet migrations run only through db.Database.upgrade()")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()

"""tunefleet's database: models, Alembic migrations, sessions and repository functions.

Imports nothing of tunefleet's other packages and no GPU library. Typical use::

    db = Database()          # TUNEFLEET_DB or the default SQLite file
    db.ensure_schema()
    with db.session() as s:
        kernel_id = repository.ensure_kernel(s, "matmul", version_hash, space_hash)

Names load on first use (PEP 562): ``from db import Objective`` imports only ``db.states``, not
SQLAlchemy, so light commands of the CLI start fast. ``Session`` is the type of what
:meth:`Database.session` yields, for annotations outside ``db/`` (which import no SQLAlchemy and
build no query: only ``db/`` speaks SQL).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from db import repository
    from db.clock import utcnow
    from db.errors import (
        ConstraintViolation,
        DatabaseError,
        DatabaseLost,
        DatabaseUnavailable,
        DatabaseURLError,
        InvalidRecord,
        InvalidTransition,
        LeaseLost,
        NotFound,
        SchemaOutOfDate,
        SchemaTooNew,
        TransientDatabaseError,
    )
    from db.repository import (
        AuditRecord,
        BestRecord,
        DeviceClassRecord,
        EnvironmentRecord,
        JobRecord,
        Lease,
        MeasuredRecord,
        StudyRecord,
        TokenRecord,
        TrialRecord,
    )
    from db.session import Database, default_url
    from db.states import (
        RETRYABLE_OUTCOMES,
        BestBackend,
        JobKind,
        JobStatus,
        Objective,
        StudyStatus,
        TokenScope,
        TrialOutcome,
    )

_WHERE: dict[str, str] = {
    "AuditRecord": "db.repository",
    "BestBackend": "db.states",
    "BestRecord": "db.repository",
    "ConstraintViolation": "db.errors",
    "Database": "db.session",
    "DatabaseError": "db.errors",
    "DatabaseLost": "db.errors",
    "DatabaseURLError": "db.errors",
    "DatabaseUnavailable": "db.errors",
    "DeviceClassRecord": "db.repository",
    "EnvironmentRecord": "db.repository",
    "InvalidRecord": "db.errors",
    "InvalidTransition": "db.errors",
    "JobKind": "db.states",
    "JobRecord": "db.repository",
    "JobStatus": "db.states",
    "Lease": "db.repository",
    "LeaseLost": "db.errors",
    "MeasuredRecord": "db.repository",
    "NotFound": "db.errors",
    "Objective": "db.states",
    "RETRYABLE_OUTCOMES": "db.states",
    "SchemaOutOfDate": "db.errors",
    "SchemaTooNew": "db.errors",
    "Session": "db.session",
    "StudyRecord": "db.repository",
    "StudyStatus": "db.states",
    "TokenRecord": "db.repository",
    "TokenScope": "db.states",
    "TransientDatabaseError": "db.errors",
    "TrialOutcome": "db.states",
    "TrialRecord": "db.repository",
    "default_url": "db.session",
    "utcnow": "db.clock",
    "repository": "db.repository",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'db' has no attribute {name!r}")
    module = importlib.import_module(where)
    value = module if name == "repository" else getattr(module, name)
    globals()[name] = value
    return value


__all__ = [
    "RETRYABLE_OUTCOMES",
    "AuditRecord",
    "BestBackend",
    "BestRecord",
    "ConstraintViolation",
    "Database",
    "DatabaseError",
    "DatabaseLost",
    "DatabaseURLError",
    "DatabaseUnavailable",
    "DeviceClassRecord",
    "EnvironmentRecord",
    "InvalidRecord",
    "InvalidTransition",
    "JobKind",
    "JobRecord",
    "JobStatus",
    "Lease",
    "LeaseLost",
    "MeasuredRecord",
    "NotFound",
    "Objective",
    "SchemaOutOfDate",
    "SchemaTooNew",
    "Session",
    "StudyRecord",
    "StudyStatus",
    "TokenRecord",
    "TokenScope",
    "TransientDatabaseError",
    "TrialOutcome",
    "TrialRecord",
    "default_url",
    "repository",
    "utcnow",
]

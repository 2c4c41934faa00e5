"""tunefleet's database: models, Alembic migrations, sessions and repository functions.

Imports nothing of tunefleet's other packages and no GPU library. Typical use::

    db = Database()          # TUNEFLEET_DB or the default SQLite file
    db.ensure_schema()
    with db.session() as s:
        kernel_id = repository.ensure_kernel(s, "matmul", version_hash, space_hash)
"""

from db import repository
from db.errors import (
    ConstraintViolation,
    DatabaseError,
    DatabaseLost,
    DatabaseUnavailable,
    DatabaseURLError,
    InvalidRecord,
    InvalidTransition,
    NotFound,
    SchemaOutOfDate,
    SchemaTooNew,
    TransientDatabaseError,
)
from db.models import (
    RETRYABLE_OUTCOMES,
    JobStatus,
    Objective,
    StudyStatus,
    TokenScope,
    TrialOutcome,
)
from db.repository import (
    AuditRecord,
    BestRecord,
    DeviceClassRecord,
    EnvironmentRecord,
    JobRecord,
    MeasuredRecord,
    StudyRecord,
    TokenRecord,
    TrialRecord,
)
from db.session import Database, default_url

__all__ = [
    "RETRYABLE_OUTCOMES",
    "AuditRecord",
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
    "JobRecord",
    "JobStatus",
    "MeasuredRecord",
    "NotFound",
    "Objective",
    "SchemaOutOfDate",
    "SchemaTooNew",
    "StudyRecord",
    "StudyStatus",
    "TokenRecord",
    "TokenScope",
    "TransientDatabaseError",
    "TrialOutcome",
    "TrialRecord",
    "default_url",
    "repository",
]

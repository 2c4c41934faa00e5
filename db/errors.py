"""Exceptions raised by the db package. Every message is one line: what is wrong and what to do."""

from __future__ import annotations


class DatabaseError(Exception):
    """Base of every error the db package raises on purpose."""


class DatabaseURLError(DatabaseError):
    """The database URL is malformed or names a backend tunefleet does not support."""


class DatabaseUnavailable(DatabaseError):
    """The database cannot be reached or opened, or stayed locked past the busy timeout."""


class TransientDatabaseError(DatabaseUnavailable):
    """A failure that a new transaction may not meet: a PostgreSQL connection reset, a
    serialization failure or deadlock, SQLite busy past the busy timeout.
    ``Database.run_with_retry`` retries these."""


class DatabaseLost(DatabaseUnavailable):
    """The database in use is gone: the SQLite file was deleted, replaced or made read-only, or a
    commit's outcome is unknown. Not retried: what was written since may not be kept."""


class SchemaOutOfDate(DatabaseError):
    """The database schema is behind this tunefleet (or missing): run ``tunefleet db upgrade``."""


class SchemaTooNew(DatabaseError):
    """The database schema is ahead of this tunefleet: upgrade tunefleet."""


class ConstraintViolation(DatabaseError):
    """A write broke a constraint of the schema (unique key, foreign key, check)."""


class InvalidTransition(DatabaseError):
    """A job status change that the job's state machine does not allow."""


class InvalidRecord(DatabaseError, ValueError):
    """A value given to a repository function is out of its domain (unknown outcome, NaN time, ...)."""


class NotFound(DatabaseError, LookupError):
    """The row asked for does not exist."""


class LeaseLost(DatabaseError):
    """A job's lease is no longer the writer's (taken over after it expired, or released): the
    write was rolled back, and its driver stops without touching the job further."""

"""The database handle: URL checks, engine and connection settings, sessions, schema migration.

SQLite connections get WAL, a busy timeout and foreign keys; every SQLite transaction that may write
starts with ``BEGIN IMMEDIATE`` so concurrent writers queue on the lock instead of failing halfway;
a read-only one runs with ``query_only`` (PostgreSQL: ``READ ONLY``), so a write in it fails every
time, not only when it meets another writer.
Errors of SQLAlchemy and the drivers leave :meth:`Database.session` as :mod:`db.errors` types.
A SQLite file is watched: deleted, replaced or made read-only while in use, every session and
:meth:`Database.check_alive` raise DatabaseLost instead of writing to a file nobody will read.
Alembic loads only to migrate, or when the stored revision is not the newest the migration files
declare: a database at the newest schema is checked with one query.
"""

from __future__ import annotations

import os
import re
import select
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import platformdirs
import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.orm import Session

from db.errors import (
    ConstraintViolation,
    DatabaseError,
    DatabaseLost,
    DatabaseUnavailable,
    DatabaseURLError,
    SchemaOutOfDate,
    SchemaTooNew,
    TransientDatabaseError,
)

if TYPE_CHECKING:
    from alembic.config import Config

_T = TypeVar("_T")

ENV_VAR = "TUNEFLEET_DB"
VERSION_TABLE = "tf_alembic_version"
BUSY_TIMEOUT_S = 30.0
PG_CONNECT_TIMEOUT_S = 10
#: Connections a PostgreSQL engine keeps open, and how many more it opens at a burst.
PG_POOL_SIZE = 10
PG_POOL_OVERFLOW = 20
#: How long (seconds) a new PostgreSQL connection is tried again while the server refuses it for
#: now (its connection slots are full, or it is starting up): nothing was sent, so it is safe.
PG_CONNECT_WAIT_S = 30.0
#: SQLSTATEs of a refused connection that a later attempt may not meet: too_many_connections,
#: cannot_connect_now.
_PG_BUSY_CODES = frozenset({"53300", "57P03"})
#: A pooled PostgreSQL connection idle in the pool longer than this (seconds) is pinged (one
#: round trip) before use; one used more recently only has its socket looked at
#: (:func:`_pg_on_checkout`).
PG_PING_IDLE_S = 10.0
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

_DRIVERS = {
    "sqlite": "sqlite",
    "sqlite+pysqlite": "sqlite",
    "postgresql": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
}
_HINT = "check --db or TUNEFLEET_DB"
_READONLY = "tunefleet_readonly"
# Where a SQLite connection's info keeps when (time.monotonic()) its last BEGIN was sent: a writer
# waits for the lock from then on.
_BEGIN_AT = "tunefleet_begin_at"
# Where it keeps the query_only setting it last sent (a connection keeps it across transactions).
_QUERY_ONLY = "tunefleet_query_only"
# Serializes concurrent `upgrade` calls on one PostgreSQL database (any constant works).
_PG_MIGRATION_LOCK = 0x7475_6E65
# SQLSTATEs after which the same transaction, run again, may succeed.
_PG_RETRYABLE_CODES = frozenset({"40001", "40P01"})  # serialization failure, deadlock
# A migration file's ``revision`` or ``down_revision`` line: name, quoted value (or None).
_REVISION_LINE = re.compile(
    r"""^(revision|down_revision)\s*(?::[^=]*)?=\s*(?:"([^"]*)"|'([^']*)'|None)\s*$""", re.M
)


def declared_head() -> str | None:
    """The newest revision as the migration files declare it, read as text (Alembic not
    imported); None if a file does not declare both revisions in that plain form or the files do
    not form one chain (then Alembic decides)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        found = {m[1]: m[2] or m[3] or None for m in _REVISION_LINE.finditer(path.read_text())}
        revision = found.get("revision")
        if revision is None or "down_revision" not in found:
            return None
        revisions.add(revision)
        if found["down_revision"] is not None:
            parents.add(found["down_revision"])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def default_url() -> str:
    """``$TUNEFLEET_DB`` if set, else a SQLite file ``tunefleet.db`` in the user data folder (created)."""
    url = os.environ.get(ENV_VAR)
    if url:
        return url
    folder = Path(platformdirs.user_data_dir("tunefleet"))
    folder.mkdir(parents=True, exist_ok=True)
    return URL.create("sqlite", database=str(folder / "tunefleet.db")).render_as_string()


def _parse_url(text: str) -> URL:
    try:
        url = sa.make_url(text)
    except (exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        shown = re.sub(r"//([^/@:]*):[^/@]*@", r"//\1:***@", text)  # never echo a password
        raise DatabaseURLError(
            f"malformed database URL {shown!r}; "
            "use sqlite:///PATH or postgresql+psycopg://USER@HOST:PORT/DB (PORT a number)"
        ) from None
    if url.port is not None and not 0 < url.port < 65536:
        raise DatabaseURLError(
            f"port {url.port} in database URL {url.render_as_string()} is not in 1-65535"
        )
    driver = _DRIVERS.get(url.drivername)
    if driver is None:
        raise DatabaseURLError(
            f"unsupported database {url.drivername!r} in {url.render_as_string()}; "
            "use sqlite:///PATH or postgresql+psycopg://USER@HOST:PORT/DB"
        )
    url = url.set(drivername=driver)
    if driver == "sqlite" and not url.database:
        raise DatabaseURLError(
            f"SQLite URL {text!r} names no file; use sqlite:///PATH (relative) or sqlite:////PATH"
        )
    return url


def _pg_busy(error: exc.SQLAlchemyError) -> bool:
    """Whether PostgreSQL refused a connection only for now: all its slots (or the role's) are
    taken, or it is starting up."""
    orig = getattr(error, "orig", None)
    if getattr(orig, "sqlstate", None) in _PG_BUSY_CODES:
        return True
    text = str(orig or error).lower()
    return "too many clients" in text or "too many connections" in text


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0].strip() if lines else type(error).__name__


def _sqlite_on_connect(busy_timeout_s: float) -> Callable[[Any, Any], None]:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Hand BEGIN to SQLAlchemy's "begin" event (the pysqlite recipe), then per-connection pragmas.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    return on_connect


def _sqlite_on_begin(connection: Connection) -> None:
    # query_only: a write in a read-only session fails at once, every time, rather than only when
    # another writer holds the lock (a read transaction cannot wait to become a write one).
    readonly = bool(connection.get_execution_options().get(_READONLY, False))
    connection.info[_BEGIN_AT] = time.monotonic()
    if connection.info.get(_QUERY_ONLY) is not readonly:
        connection.exec_driver_sql(f"PRAGMA query_only = {int(readonly)}")
        connection.info[_QUERY_ONLY] = readonly
    connection.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")


def _pg_on_checkin(_dbapi_connection: Any, record: Any) -> None:
    record.info["idle_since"] = time.monotonic()


def _pg_on_checkout(dialect: Any) -> Callable[[Any, Any, Any], None]:
    """The pool's check of a PostgreSQL connection before each use, in place of
    ``pool_pre_ping``'s round trip per session: an idle connection's socket has nothing to read
    unless the server ended it (a terminated backend, a restart: its error message, then EOF),
    which a poll with no timeout sees; a connection idle longer than ``PG_PING_IDLE_S`` is also
    pinged. A stale one is replaced (DisconnectionError: the pool opens another). A connection
    ended after the check fails its first statement, as it could after a ping: a transient
    error, retried by :meth:`Database.run_with_retry`."""

    def on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if dbapi_connection.closed or dbapi_connection.broken:
            raise exc.DisconnectionError("the connection was closed")
        poller = select.poll()
        poller.register(dbapi_connection.fileno(), select.POLLIN)
        if poller.poll(0):
            raise exc.DisconnectionError("the server ended the connection while it was idle")
        idle_since = record.info.get("idle_since")
        if idle_since is not None and time.monotonic() - idle_since > PG_PING_IDLE_S:
            try:
                dialect.do_ping(dbapi_connection)
            except Exception as e:  # any failure of the ping: the connection is not usable
                raise exc.DisconnectionError(f"ping failed: {_first_line(e)}") from e

    return on_checkout


class Database:
    """A tunefleet database at ``url`` (default: :func:`default_url`); connects lazily.

    Raises DatabaseURLError at construction for a malformed or unsupported URL; an unreachable server
    shows up as DatabaseUnavailable at the first session or schema call. ``busy_timeout_s``: how
    long a SQLite writer waits for another's lock before TransientDatabaseError.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        connect_wait_s: float = PG_CONNECT_WAIT_S,
    ) -> None:
        self._url = _parse_url(url if url is not None else default_url())
        self.backend = "sqlite" if self._url.drivername == "sqlite" else "postgresql"
        self.busy_timeout_s = busy_timeout_s
        self.connect_wait_s = connect_wait_s
        self._file: Path | None = None
        self._identity: tuple[int, int] | None = None
        if self.backend == "sqlite" and self._url.database not in (None, "", ":memory:"):
            self._file = Path(str(self._url.database)).absolute()
            self._note_identity()
        connect_args: dict[str, Any] = {}
        pool: dict[str, Any] = {}
        if self.backend == "postgresql":
            if "connect_timeout" not in self._url.query:
                connect_args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
            # A server's scheduler runs many drivers (threads) at once: keep their connections
            # open rather than open and close one per session beyond SQLAlchemy's default 5.
            pool = {"pool_size": PG_POOL_SIZE, "max_overflow": PG_POOL_OVERFLOW}
        try:
            self.engine: Engine = sa.create_engine(
                self._url,
                connect_args=connect_args,
                **pool,
            )
        except (exc.ArgumentError, ImportError) as e:
            raise DatabaseURLError(f"cannot use {self.url}: {_first_line(e)}; {_HINT}") from None
        if self.backend == "postgresql":
            event.listen(self.engine, "checkin", _pg_on_checkin)
            event.listen(self.engine, "checkout", _pg_on_checkout(self.engine.dialect))
        if self.backend == "sqlite":
            event.listen(self.engine, "connect", _sqlite_on_connect(busy_timeout_s))
            event.listen(self.engine, "begin", _sqlite_on_begin)

    @property
    def url(self) -> str:
        """The URL with any password masked, for messages."""
        return self._url.render_as_string(hide_password=True)

    def _where(self) -> str:
        if self.backend == "sqlite":
            return f"SQLite file {self._url.database}"
        return f"PostgreSQL at {self._url.host or 'localhost'}:{self._url.port or 5432}"

    def _translate(self, error: exc.SQLAlchemyError, since: float | None = None) -> DatabaseError:
        """Our exception type for a SQLAlchemy/driver error raised while using this database;
        ``since``: when (``time.monotonic()``) the failed transaction's BEGIN was sent, for how
        long a SQLite writer waited for the lock."""
        detail = _first_line(getattr(error, "orig", None) or error)
        lowered = detail.lower()
        if isinstance(error, exc.IntegrityError):
            return ConstraintViolation(f"write to {self._where()} violates a constraint: {detail}")
        if "no such table" in lowered or ("relation" in lowered and "does not exist" in lowered):
            return SchemaOutOfDate(
                f"{self._where()} lacks tunefleet's tables ({detail}); run `tunefleet db upgrade`"
            )
        if isinstance(error, exc.OperationalError) and self.backend == "sqlite":
            if "locked" in lowered or "busy" in lowered:
                waited = (
                    f"up to {self.busy_timeout_s:g} s"
                    if since is None
                    else f"{time.monotonic() - since:.1f} s of the {self.busy_timeout_s:g} s allowed"
                )
                return TransientDatabaseError(
                    f"{self._where()} stayed locked by another writer (waited {waited}); retry, "
                    "or use PostgreSQL for many concurrent writers"
                )
            return DatabaseUnavailable(f"cannot use {self._where()}: {detail}; {_HINT}")
        code = getattr(getattr(error, "orig", None), "sqlstate", None)
        if isinstance(error, exc.DBAPIError) and (
            error.connection_invalidated or code in _PG_RETRYABLE_CODES
        ):
            return TransientDatabaseError(f"lost {self._where()}: {detail}; {_HINT}")
        if isinstance(error, exc.OperationalError | exc.InterfaceError):
            return DatabaseUnavailable(f"lost {self._where()}: {detail}; {_HINT}")
        return DatabaseError(f"database error on {self._where()}: {detail}")

    def _connect_error(self, error: exc.SQLAlchemyError) -> DatabaseUnavailable:
        detail = _first_line(getattr(error, "orig", None) or error)
        if self.backend == "postgresql":
            reason = detail.rsplit(": ", 1)[-1].strip()
            reason = reason[:1].lower() + reason[1:]
            if _pg_busy(error):
                return TransientDatabaseError(
                    f"{self._where()} refused new connections for {self.connect_wait_s:g} s: "
                    f"{reason}; raise its max_connections or run fewer servers (each keeps up "
                    f"to {PG_POOL_SIZE + PG_POOL_OVERFLOW} connections)"
                )
            return DatabaseUnavailable(f"cannot reach {self._where()}: {reason}; {_HINT}")
        return DatabaseUnavailable(f"cannot open {self._where()}: {detail}; {_HINT}")

    def _connect(self) -> Connection:
        """A pooled connection; while PostgreSQL refuses one for now (:func:`_pg_busy`), tried
        again with backoff for up to ``connect_wait_s``."""
        deadline = time.monotonic() + self.connect_wait_s
        delay = 0.05
        while True:
            try:
                return self.engine.connect()
            except exc.SQLAlchemyError as e:
                if not _pg_busy(e) or time.monotonic() + delay > deadline:
                    raise self._connect_error(e) from e
            time.sleep(delay)
            delay = min(2 * delay, 1.0)

    def _note_identity(self) -> None:
        """Record the SQLite file's (device, inode) the first time it exists."""
        if self._file is not None and self._identity is None:
            try:
                st = os.stat(self._file)
            except FileNotFoundError:
                return
            self._identity = (st.st_dev, st.st_ino)

    def _check_file(self, write: bool = True) -> None:
        """Raise DatabaseLost if the SQLite file seen before is gone or another file, or (when
        ``write``) read-only.

        Read-only means no write permission for us or, for root (whom permissions do not stop),
        no write bit at all: someone marked the file so that nothing writes to it.
        """
        if self._file is None or self._identity is None:
            return
        try:
            st = os.stat(self._file)
        except FileNotFoundError:
            raise DatabaseLost(
                f"{self._where()} was deleted while in use; what was written since is lost: "
                "restore the file or start again with a new database"
            ) from None
        if (st.st_dev, st.st_ino) != self._identity:
            raise DatabaseLost(
                f"{self._where()} was replaced by another file while in use; stop and check "
                "which file is the right one"
            )
        if not write:
            return
        writable = os.access(self._file, os.W_OK) and st.st_mode & (
            stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
        )
        if not writable:
            raise DatabaseLost(
                f"{self._where()} is read-only, so nothing can be written to it; make it "
                f"writable (chmod u+w {self._file}) and resume the job"
            )

    def check_alive(self) -> None:
        """Raise a DatabaseError unless the database is still there and takes writes.

        SQLite: the file is the one opened (same device and inode), writable, and its write lock
        can be taken (an empty write transaction). PostgreSQL: a round trip to the server.
        Transient errors are retried as in :meth:`run_with_retry`. Cheap enough to call once per
        driver loop.
        """
        self.run_with_retry(lambda s: s.execute(sa.text("SELECT 1")))

    @contextmanager
    def _connection(self, *, write: bool = False) -> Iterator[Connection]:
        self._check_file(write)
        conn = self._connect()
        self._note_identity()
        with conn:
            yield conn

    @contextmanager
    def session(self, *, readonly: bool = False) -> Iterator[Session]:
        """A session in one transaction: committed when the block ends, rolled back if it raises.

        ``readonly=True`` rolls back at the end instead; a write in it raises (SQLite
        ``query_only``, PostgreSQL ``BEGIN READ ONLY``), and on SQLite it takes no write lock.
        SQLAlchemy and driver errors leave as db.errors types; other exceptions pass unchanged.
        A write is confirmed: if the SQLite file stopped being the one opened during the block, or
        the connection was lost during the commit, DatabaseLost says the write may not be kept.
        """
        with self._connection(write=not readonly) as conn:
            if readonly:
                # PostgreSQL: BEGIN READ ONLY (psycopg's flag, reset when the connection is
                # returned to the pool), so that a write raises there as on SQLite.
                options = {"postgresql_readonly": True} if self.backend == "postgresql" else {}
                conn = conn.execution_options(**{_READONLY: True}, **options)
            session = Session(bind=conn, expire_on_commit=False, autoflush=True)
            try:
                yield session
                if readonly:
                    session.rollback()
                else:
                    self._commit(session, conn)
            except BaseException as e:
                session.rollback()
                if isinstance(e, exc.SQLAlchemyError):
                    raise self._translate(e, conn.info.get(_BEGIN_AT)) from e
                raise
            finally:
                session.close()

    def _commit(self, session: Session, conn: Connection) -> None:
        self._check_file()  # before: nothing is committed to a deleted or replaced file
        try:
            session.commit()
        except exc.DBAPIError as e:
            error = self._translate(e, conn.info.get(_BEGIN_AT))
            if self.backend == "postgresql" and isinstance(error, TransientDatabaseError):
                raise DatabaseLost(
                    f"lost {self._where()} while committing, so whether the last write was kept "
                    f"is unknown ({_first_line(e.orig or e)}); check the job before resuming it"
                ) from e
            raise error from e
        self._check_file()  # after: the commit reached the file that is still at the path

    def run_with_retry(
        self,
        fn: Callable[[Session], _T],
        *,
        readonly: bool = False,
        retries: int = 4,
        backoff_s: float = 0.25,
    ) -> _T:
        """``fn(session)`` in one :meth:`session`, run again in a new transaction after a
        TransientDatabaseError, up to ``retries`` more times, waiting ``backoff_s``, then twice as
        long each time; the last error is raised.

        ``fn`` must do all its work through the session: a failed attempt is rolled back whole, so
        nothing it wrote is kept twice. A connection lost during the commit is not retried
        (DatabaseLost): the server may have kept the write.
        """
        delay = backoff_s
        for _ in range(retries):
            try:
                with self.session(readonly=readonly) as s:
                    return fn(s)
            except TransientDatabaseError:
                time.sleep(delay)
                delay *= 2
        with self.session(readonly=readonly) as s:
            return fn(s)

    def write_one(
        self, fn: Callable[[Connection], _T], *, retries: int = 4, backoff_s: float = 0.25
    ) -> _T:
        """``fn(connection)``, which must run exactly one writing statement, in a transaction of
        its own. On PostgreSQL the connection is in autocommit: one round trip, without the
        BEGIN, COMMIT and ORM session of :meth:`run_with_retry` (a reused trial row per ask
        made them a tenth of a server's Python time in the fleet simulation). Run again after a
        serialization failure or deadlock, as :meth:`run_with_retry` does (nothing was written);
        a connection lost during the statement raises DatabaseLost (the server may have kept
        the write). On SQLite: :meth:`run_with_retry` on the session's connection."""
        if self.backend == "sqlite":
            return self.run_with_retry(
                lambda s: fn(s.connection()), retries=retries, backoff_s=backoff_s
            )
        delay = backoff_s
        for attempt in range(retries + 1):
            with self._connection(write=True) as conn:
                try:
                    return fn(conn.execution_options(isolation_level="AUTOCOMMIT"))
                except exc.SQLAlchemyError as e:
                    error = self._translate(e)
                    if isinstance(e, exc.DBAPIError) and e.connection_invalidated:
                        raise DatabaseLost(
                            f"lost {self._where()} during a write, so whether it was kept is "
                            f"unknown ({_first_line(e.orig or e)}); check the job before resuming it"
                        ) from e
                    if not isinstance(error, TransientDatabaseError) or attempt == retries:
                        raise error from e
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _alembic_config(self) -> Config:
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        return config

    def _head(self) -> str:
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(self._alembic_config()).get_current_head()
        if head is None:
            raise DatabaseError(f"no migrations found in {MIGRATIONS_DIR}; reinstall tunefleet")
        return head

    def current_revision(self) -> str | None:
        """The schema revision stored in the database, or None if it has no tunefleet schema."""
        with self._connection() as conn:
            try:
                if not sa.inspect(conn).has_table(VERSION_TABLE):
                    return None
                stored = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}"))
                revisions = list(stored.scalars())
            except exc.SQLAlchemyError as e:
                raise self._translate(e) from e
        if len(revisions) > 1:
            raise DatabaseError(
                f"{self._where()} stores {len(revisions)} schema revisions, not one; "
                "it was migrated by something other than tunefleet"
            )
        return revisions[0] if revisions else None

    def upgrade(self) -> tuple[str | None, str]:
        """Migrate the schema to the newest revision (creating it in an empty database), atomically;
        return the revisions before (None: no schema) and after.

        Raises SchemaTooNew for a database ahead of this code (it is left untouched).
        """
        from alembic import command

        before = self.current_revision()
        if before is not None and not self._known(before):
            self.check_schema()
        config = self._alembic_config()
        with self._connection(write=True) as conn:
            try:
                with conn.begin():
                    if self.backend == "postgresql":
                        conn.execute(
                            sa.text("SELECT pg_advisory_xact_lock(:key)"),
                            {"key": _PG_MIGRATION_LOCK},
                        )
                    config.attributes["connection"] = conn
                    command.upgrade(config, "head")
            except exc.SQLAlchemyError as e:
                raise self._translate(e) from e
        return before, self._head()

    def _known(self, revision: str) -> bool:
        from alembic.script import ScriptDirectory

        script = ScriptDirectory.from_config(self._alembic_config())
        return revision in {rev.revision for rev in script.walk_revisions()}

    def check_schema(self) -> None:
        """Raise SchemaOutOfDate if the database is behind this code, SchemaTooNew if it is ahead."""
        current = self.current_revision()
        if current is not None and current == declared_head():
            return
        head = self._head()
        if current == head:
            return
        if current is None:
            raise SchemaOutOfDate(
                f"{self._where()} has no tunefleet schema; run `tunefleet db upgrade`"
            )
        if not self._known(current):
            raise SchemaTooNew(
                f"{self._where()} is at schema revision {current}, newer than this tunefleet "
                f"(head {head}); upgrade tunefleet"
            )
        raise SchemaOutOfDate(
            f"{self._where()} is at schema revision {current}, behind {head}; "
            "run `tunefleet db upgrade`"
        )

    def ensure_schema(self) -> None:
        """Create the schema in a database that has none, then :meth:`check_schema`.

        An existing schema that is behind is never migrated here: upgrading a shared database is the
        deliberate act of ``tunefleet db upgrade``.
        """
        if self.current_revision() is None:
            self.upgrade()
        self.check_schema()

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

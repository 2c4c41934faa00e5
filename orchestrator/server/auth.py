"""Bearer-token authentication, scopes and the audit trail of the HTTP API.

Deny by default: every route but ``/healthz`` depends on :func:`require`, which answers 401 for a
missing, unknown, revoked or expired token and 403 for a token whose scope is below the route's
(a refused change is audited, rate-limited per token: :mod:`orchestrator.server.refusals`).
Scopes are ordered ``read < submit < admin``. Tokens are checked against the database (which keeps
SHA-256 digests, see :mod:`db.repository`); a server reuses an accepted check for
:data:`REMEMBER_S`, so a revocation holds within a second on every server.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from db import Database, DatabaseError, TokenScope, repository
from orchestrator.server.errors import ApiError

log = logging.getLogger("tunefleet.server")
_K = TypeVar("_K")
_V = TypeVar("_V")

SCOPE_RANK = {TokenScope.READ: 0, TokenScope.SUBMIT: 1, TokenScope.ADMIN: 2}
_MAX_TOKEN_CHARS = 200
#: How long a server reuses a token check: a revocation holds within this time on every server
#: (at once on the server that revoked it).
REMEMBER_S = 1.0
#: How often one server stamps a token's last use (the database keeps one stamp a minute).
STAMP_EVERY_S = 45.0
MAX_STAMPED = 4096

bearer = HTTPBearer(auto_error=False, description="A token from `tunefleet token create`.")


@dataclass(frozen=True)
class Principal:
    """Who sent a request: the token's id, team and scope."""

    token_id: int
    team: str
    scope: TokenScope

    def allows(self, needed: TokenScope) -> bool:
        return SCOPE_RANK[self.scope] >= SCOPE_RANK[needed]

    @property
    def admin(self) -> bool:
        return self.scope is TokenScope.ADMIN

    def team_filter(self) -> str | None:
        """The team whose jobs this token may see and change (None: an admin, every team)."""
        return None if self.admin else self.team


class Authenticator:
    """Checks tokens against the database on every request, in read-only sessions: a request
    never waits for the write lock that a running job's writes take on SQLite.

    A token's use is stamped (``last_used_at``, at most once a minute in the database) apart
    from the request: :meth:`note_use` has :meth:`stamp` write it in a worker thread, best
    effort, at most once per :data:`STAMP_EVERY_S` from this server.
    """

    def __init__(self, database: Database) -> None:
        self.database = database
        self._stamped: OrderedDict[int, float] = OrderedDict()
        self._pending: set[asyncio.Task[None]] = set()
        self._known: OrderedDict[bytes, tuple[Principal, float]] = OrderedDict()
        self._lock = threading.Lock()

    def remembered(self, token: str) -> Principal | None:
        """The principal of ``token`` if the database accepted it in the last
        :data:`REMEMBER_S` (no query), else None."""
        digest = hashlib.sha256(token.encode()).digest()
        with self._lock:
            hit = self._known.get(digest)
        if hit is None or time.monotonic() - hit[1] >= REMEMBER_S:
            return None
        return hit[0]

    def forget(self, token_id: int) -> None:
        """Drop what is remembered of token ``token_id`` (revoked here)."""
        with self._lock:
            for digest in [d for d, (p, _) in self._known.items() if p.token_id == token_id]:
                del self._known[digest]

    def note_use(self, token_id: int) -> None:
        """A request used token ``token_id``: :meth:`stamp` it in a worker thread, without
        waiting, unless this server did in the last :data:`STAMP_EVERY_S` (call from the event
        loop)."""
        now = time.monotonic()
        with self._lock:
            at = self._stamped.get(token_id)
            if at is not None and now - at < STAMP_EVERY_S:
                return
            _keep(self._stamped, token_id, now)
        task = asyncio.get_running_loop().create_task(run_in_threadpool(self.stamp, token_id))
        self._pending.add(task)  # the loop holds tasks weakly
        task.add_done_callback(self._pending.discard)

    def stamp(self, token_id: int) -> None:
        """Stamp token ``token_id``'s last use; a database error is logged (and the stamp is due
        again), never raised: a use that could not be stamped is stamped at a later one."""
        try:
            # No retries: a later request stamps it, and a worker thread is not held for long.
            self.database.write_one(lambda c: repository.stamp_token_use(c, token_id), retries=0)
        except DatabaseError as exc:
            log.warning("token %d: its last use is not stamped: %s", token_id, exc)
            with self._lock:
                self._stamped.pop(token_id, None)

    def __call__(self, token: str) -> Principal:
        """The principal of ``token``; ApiError 401 if it is unknown, revoked or expired."""
        if not token or len(token) > _MAX_TOKEN_CHARS:
            raise ApiError(401, "invalid token; create one with `tunefleet token create`")
        digest = hashlib.sha256(token.encode()).digest()
        with self.database.session(readonly=True) as s:
            record = repository.verify_token(s, token)
        if record is None:
            raise ApiError(401, "token unknown, revoked or expired; ask an admin for a new one")
        principal = Principal(record.id, record.team, TokenScope(record.scope))
        with self._lock:
            _keep(self._known, digest, (principal, time.monotonic()))
        return principal


def _keep(recent: OrderedDict[_K, _V], key: _K, value: _V) -> None:
    """Set ``recent[key]`` as its newest entry, dropping the oldest past :data:`MAX_STAMPED`."""
    recent[key] = value
    recent.move_to_end(key)
    while len(recent) > MAX_STAMPED:
        recent.popitem(last=False)


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def require(scope: TokenScope) -> Callable[..., Awaitable[Principal]]:
    """A FastAPI dependency: the request's principal if its token has at least ``scope``."""

    async def dependency(request: Request, credentials: Credentials) -> Principal:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise ApiError(401, "missing token; send `Authorization: Bearer TOKEN`")
        authenticator: Authenticator = request.app.state.authenticator
        principal = authenticator.remembered(credentials.credentials)
        if principal is None:
            principal = await run_in_threadpool(authenticator, credentials.credentials)
        authenticator.note_use(principal.token_id)
        request.state.principal = principal
        if not principal.allows(scope):
            if request.method != "GET":
                await run_in_threadpool(
                    request.app.state.refusals.write,
                    principal,
                    "request.denied",
                    target=f"{request.method} {request.url.path}",
                    detail={"needed": scope.value},
                )
            raise ApiError(
                403,
                f"this needs a {scope.value} token; yours is {principal.scope.value} "
                f"(team {principal.team})",
            )
        return principal

    return dependency


def audit(
    database: Database,
    principal: Principal | None,
    action: str,
    *,
    target: str | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Write one audit row: who (token id and team, None for the command line) did what to what."""
    with database.session() as s:
        repository.write_audit(
            s,
            action=action,
            token_id=principal.token_id if principal else None,
            team=principal.team if principal else None,
            target=target,
            detail=detail,
        )


ReadPrincipal = Annotated[Principal, Depends(require(TokenScope.READ))]
SubmitPrincipal = Annotated[Principal, Depends(require(TokenScope.SUBMIT))]
AdminPrincipal = Annotated[Principal, Depends(require(TokenScope.ADMIN))]

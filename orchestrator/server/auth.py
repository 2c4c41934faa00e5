"""Bearer-token authentication, scopes and the audit trail of the HTTP API.

Deny by default: every route but ``/healthz`` depends on :func:`require`, which answers 401 for a
missing, unknown, revoked or expired token and 403 for a token whose scope is below the route's
(a refused change is audited, rate-limited per token: :mod:`orchestrator.server.refusals`).
Scopes are ordered ``read < submit < admin``. Tokens are checked against the database (which keeps
SHA-256 digests, see :mod:`db.repository`); a server reuses an accepted check for
:data:`REMEMBER_S`, so a revocation holds within a second on every server.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from db import Database, TokenScope, repository
from orchestrator.server.errors import ApiError

SCOPE_RANK = {TokenScope.READ: 0, TokenScope.SUBMIT: 1, TokenScope.ADMIN: 2}
_MAX_TOKEN_CHARS = 200
#: How long a server reuses a token check: a revocation holds within this time on every server
#: (at once on the server that revoked it).
REMEMBER_S = 1.0
#: How often one server stamps a token's last use: under the database's minute, so that the
#: read-only checks between two stamps never find the stamp due.
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
    """Checks tokens against the database on every request.

    ``verify_token`` stamps a token's ``last_used_at`` when the stamp is a minute old, which is a
    write; on SQLite a write inside a read transaction fails at once when another writer (a
    running job) committed meanwhile. So a token this server has not stamped in the last
    :data:`STAMP_EVERY_S` is checked in a write session (which waits for the lock), and after that,
    while the stamp is fresh, in a read-only one (which writes nothing).
    """

    def __init__(self, database: Database) -> None:
        self.database = database
        self._stamped: OrderedDict[bytes, float] = OrderedDict()
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

    def _fresh(self, digest: bytes) -> bool:
        with self._lock:
            at = self._stamped.get(digest)
            return at is not None and time.monotonic() - at < STAMP_EVERY_S

    def _stamp(self, digest: bytes) -> None:
        with self._lock:
            self._stamped[digest] = time.monotonic()
            self._stamped.move_to_end(digest)
            while len(self._stamped) > MAX_STAMPED:
                self._stamped.popitem(last=False)

    def __call__(self, token: str) -> Principal:
        """The principal of ``token``; ApiError 401 if it is unknown, revoked or expired."""
        if not token or len(token) > _MAX_TOKEN_CHARS:
            raise ApiError(401, "invalid token; create one with `tunefleet token create`")
        digest = hashlib.sha256(token.encode()).digest()
        fresh = self._fresh(digest)
        with self.database.session(readonly=fresh) as s:
            record = repository.verify_token(s, token)
        if record is None:
            raise ApiError(401, "token unknown, revoked or expired; ask an admin for a new one")
        if not fresh:
            self._stamp(digest)
        principal = Principal(record.id, record.team, TokenScope(record.scope))
        with self._lock:
            self._known[digest] = (principal, time.monotonic())
            self._known.move_to_end(digest)
            while len(self._known) > MAX_STAMPED:
                self._known.popitem(last=False)
        return principal


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

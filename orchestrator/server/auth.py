"""Bearer-token authentication, scopes and the audit trail of the HTTP API.

Deny by default: every route but ``/healthz`` depends on :func:`require`, which answers 401 for a
missing, unknown, revoked or expired token and 403 for a token whose scope is below the route's.
Scopes are ordered ``read < submit < admin``. Tokens are checked against the database on every
request (stored as SHA-256 digests by :mod:`db.repository`), so a revocation takes effect at once on
every server.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from db import Database, repository
from db.models import TokenScope
from orchestrator.server.errors import ApiError

SCOPE_RANK = {TokenScope.READ: 0, TokenScope.SUBMIT: 1, TokenScope.ADMIN: 2}
_MAX_TOKEN_CHARS = 200
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
        self._lock = threading.Lock()

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
        return Principal(record.id, record.team, TokenScope(record.scope))


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def require(scope: TokenScope) -> Callable[..., Principal]:
    """A FastAPI dependency: the request's principal if its token has at least ``scope``."""

    def dependency(request: Request, credentials: Credentials) -> Principal:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise ApiError(401, "missing token; send `Authorization: Bearer TOKEN`")
        principal = request.app.state.authenticator(credentials.credentials)
        request.state.principal = principal
        if not principal.allows(scope):
            if request.method != "GET":
                audit(
                    request.app.state.database,
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

"""Token use cases: create, list and revoke the API's bearer tokens (``tunefleet token`` on a
database, and the server's ``/v1/tokens`` routes, both through these functions).

Each change writes its audit row in the same transaction as the change itself (no change without
its row): who did it is the caller's :class:`Actor`. The secret of a new token is returned once;
the database keeps its SHA-256 only. Team names are checked by the caller's boundary (the CLI and
the server check them against ``orchestrator.server.names.team``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from db.states import TokenScope
from orchestrator.app.views import View
from orchestrator.errors import InvalidRequest, NotFound

if TYPE_CHECKING:
    from db import Database
    from db.repository import TokenRecord


class TokenState(str, enum.Enum):
    """Whether a token is accepted now."""

    ACTIVE = "active"
    REVOKED = "revoked"
    EXPIRED = "expired"


@dataclasses.dataclass(frozen=True)
class Actor:
    """Who changes tokens, for the audit row: a token's id and team (a server request), or
    neither (the command line on the database); ``via``: ``cli`` or ``api``."""

    via: str
    token_id: int | None = None
    team: str | None = None


CLI = Actor("cli")


@dataclasses.dataclass(frozen=True)
class TokenView(View):
    """A token without its secret; ``state`` as of when the view was made."""

    id: int
    team: str
    scope: TokenScope
    name: str | None
    state: TokenState
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


@dataclasses.dataclass(frozen=True)
class NewToken(View):
    """A token just made and its secret (shown once); on the wire the token's fields plus
    ``token``, the secret."""

    token: TokenView
    secret: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.token.to_dict(), "token": self.secret}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NewToken:
        return cls(TokenView.from_dict(data), str(data["token"]))


def _aware(at: datetime) -> datetime:
    """``at`` with its time zone (SQLite returns naive datetimes; every stored time is UTC)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def _utc(at: datetime | None) -> datetime | None:
    return _aware(at) if at is not None else None


def _view(record: TokenRecord, now: datetime) -> TokenView:
    expires = _utc(record.expires_at)
    if record.revoked_at is not None:
        state = TokenState.REVOKED
    elif expires is not None and expires <= now:
        state = TokenState.EXPIRED
    else:
        state = TokenState.ACTIVE
    return TokenView(
        id=record.id,
        team=record.team,
        scope=TokenScope(record.scope),
        name=record.name,
        state=state,
        created_at=_aware(record.created_at),
        expires_at=expires,
        revoked_at=_utc(record.revoked_at),
        last_used_at=_utc(record.last_used_at),
    )


def _audit(s: Any, actor: Actor, action: str, target: str) -> None:
    from db import repository

    repository.write_audit(
        s,
        action=action,
        token_id=actor.token_id,
        team=actor.team,
        target=target,
        detail={"via": actor.via},
    )


def create_token(
    database: Database,
    team: str,
    scope: TokenScope | str,
    *,
    expires_days: float | None = None,
    name: str | None = None,
    actor: Actor = CLI,
) -> NewToken:
    """A new token of ``team`` (a checked name) with ``scope``, valid for ``expires_days``
    (None: until revoked). InvalidRequest for an unknown scope or a bad lifetime."""
    from db import repository

    try:
        chosen = TokenScope(scope)
    except ValueError:
        raise InvalidRequest(f"unknown scope {scope!r}; use read, submit or admin") from None
    if expires_days is not None and not expires_days > 0:
        raise InvalidRequest(f"a token's lifetime must be positive, got {expires_days} days")
    from db import utcnow

    now = utcnow()
    expires_at = None if expires_days is None else now + timedelta(days=expires_days)
    with database.session() as s:
        record, secret = repository.create_token(s, team, chosen, expires_at=expires_at, name=name)
        _audit(s, actor, "token.create", f"team {record.team}")
    return NewToken(_view(record, now), secret)


def list_tokens(database: Database) -> list[TokenView]:
    """Every token (revoked and expired ones too), oldest first; never a secret."""
    from db import repository, utcnow

    with database.session(readonly=True) as s:
        records = repository.list_tokens(s)
    now = utcnow()
    return [_view(r, now) for r in records]


def revoke_token(database: Database, token_id: int, *, actor: Actor = CLI) -> None:
    """Revoke token ``token_id``; NotFound if there is no such token or it is already revoked
    (every server refuses it from its next check on)."""
    from db import repository

    with database.session() as s:
        if not repository.revoke_token(s, token_id):
            raise NotFound(f"no active token {token_id}; see `tunefleet token list`")
        _audit(s, actor, "token.revoke", f"token {token_id}")

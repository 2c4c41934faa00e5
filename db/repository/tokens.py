"""API tokens (stored hashed) and the audit log."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.errors import InvalidRecord
from db.models import AuditEntry, Token, TokenScope, utcnow
from db.repository._rows import coerce, record


@dataclass(frozen=True)
class TokenRecord:
    """An API token row, without its hash."""

    id: int
    team: str
    scope: TokenScope
    name: str | None
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


@dataclass(frozen=True)
class AuditRecord:
    """One audit log entry."""

    id: int
    at: datetime
    token_id: int | None
    team: str | None
    action: str
    target: str | None
    detail: dict[str, Any] | None


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    s: Session,
    team: str,
    scope: TokenScope | str,
    *,
    expires_at: datetime | None = None,
    name: str | None = None,
) -> tuple[TokenRecord, str]:
    """A new token of ``team`` with ``scope``: its record and the token itself.

    The token (``secrets.token_urlsafe(32)``) is returned only here; the database keeps its
    SHA-256. Raises InvalidRecord for an empty team or an unknown scope.
    """
    if not isinstance(team, str) or not team.strip() or len(team) > 200:
        raise InvalidRecord(f"token team must be a non-empty name of <= 200 chars, got {team!r}")
    if name is not None and len(name) > 200:
        raise InvalidRecord("token name must be <= 200 chars")
    token = secrets.token_urlsafe(32)
    row = Token(
        team=team,
        scope=coerce(TokenScope, scope, "token scope"),
        token_hash=_token_hash(token),
        name=name,
        expires_at=expires_at,
    )
    s.add(row)
    s.flush()
    return record(TokenRecord, row), token


#: stamp_token_use writes last_used_at at most this often per token.
LAST_USED_EVERY = timedelta(minutes=1)


def verify_token(s: Session, token: str) -> TokenRecord | None:
    """The record of ``token`` if it is known, not revoked and not expired; else None. Reads
    only (a read-only session will do); :func:`stamp_token_use` records the use."""
    if not isinstance(token, str) or not token:
        return None
    row = s.scalar(sa.select(Token).where(Token.token_hash == _token_hash(token)))
    if row is None or row.revoked_at is not None:
        return None
    if row.expires_at is not None and row.expires_at <= utcnow():
        return None
    return record(TokenRecord, row)


def stamp_token_use(s: Session | sa.Connection, token_id: int) -> bool:
    """Set token ``token_id``'s ``last_used_at`` to now if it is unset or older than
    :data:`LAST_USED_EVERY`; whether it was set. One ``UPDATE``: ``s`` may be a connection in
    autocommit (:meth:`db.Database.write_one`)."""
    now = utcnow()
    stamp = (
        sa.update(Token)
        .where(
            Token.id == token_id,
            sa.or_(Token.last_used_at.is_(None), Token.last_used_at <= now - LAST_USED_EVERY),
        )
        .values(last_used_at=now)
        .returning(Token.id)
    )
    return s.execute(stamp).first() is not None


def list_tokens(s: Session) -> list[TokenRecord]:
    """Every token, revoked and expired ones included, oldest first."""
    return [record(TokenRecord, t) for t in s.scalars(sa.select(Token).order_by(Token.id))]


def revoke_token(s: Session, token_id: int) -> bool:
    """Revoke token ``token_id``; False if there is no such token or it was already revoked."""
    row = s.get(Token, token_id, with_for_update=True)
    if row is None or row.revoked_at is not None:
        return False
    row.revoked_at = utcnow()
    s.flush()
    return True


def active_token_count(s: Session) -> int:
    """How many tokens are neither revoked nor expired."""
    query = sa.select(sa.func.count(Token.id)).where(
        Token.revoked_at.is_(None),
        sa.or_(Token.expires_at.is_(None), Token.expires_at > utcnow()),
    )
    return s.scalar(query) or 0


def write_audit(
    s: Session,
    *,
    action: str,
    token_id: int | None = None,
    team: str | None = None,
    target: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> None:
    """Append one entry to the audit log (``action`` e.g. ``job.submit``, ``token.revoke``)."""
    if not isinstance(action, str) or not action or len(action) > 64:
        raise InvalidRecord(f"audit action must be a non-empty name of <= 64 chars: {action!r}")
    if target is not None and len(target) > 200:
        raise InvalidRecord("audit target must be <= 200 chars")
    entry = AuditEntry(
        action=action,
        token_id=token_id,
        team=team,
        target=target,
        detail=dict(detail) if detail is not None else None,
    )
    s.add(entry)
    s.flush()


def list_audit(s: Session, limit: int = 100) -> list[AuditRecord]:
    """The ``limit`` newest audit entries, newest first."""
    rows = s.scalars(sa.select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit))
    return [record(AuditRecord, e) for e in rows]

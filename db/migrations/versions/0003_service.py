"""Job priority and lease, API tokens, the audit log, provisional (retryable) trial verdicts.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

Columns are added in place on SQLite too (no batch copy): recreating tf_jobs or tf_trials would
break the foreign keys other tables hold to them. Trials stored before this revision as ``crash``
or a timeout become provisional, so each such config is measured once more instead of being taken
for the config's own verdict for ever.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCOPES = ("read", "submit", "admin")
RETRYABLE = ("crash", "compile_timeout", "run_timeout")


def _ts(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.add_column("tf_jobs", sa.Column("priority", sa.Integer, nullable=False, server_default="0"))
    op.add_column("tf_jobs", sa.Column("lease_owner", sa.String(200), nullable=True))
    op.add_column("tf_jobs", _ts("lease_expires_at"))
    op.add_column("tf_jobs", _ts("heartbeat_at"))
    op.create_index("ix_tf_jobs_queue", "tf_jobs", ["status", "priority", "created_at"])
    op.create_index("ix_tf_jobs_lease_owner", "tf_jobs", ["lease_owner"])
    op.add_column(
        "tf_trials",
        sa.Column("provisional", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.execute(
        sa.text(
            "UPDATE tf_trials SET provisional = :yes WHERE outcome IN "
            f"({', '.join(repr(o) for o in RETRYABLE)})"
        ).bindparams(yes=True)
    )
    op.create_table(
        "tf_tokens",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("team", sa.String(200), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=True),
        _ts("created_at", nullable=False),
        _ts("expires_at"),
        _ts("revoked_at"),
        _ts("last_used_at"),
        sa.PrimaryKeyConstraint("id", name="pk_tf_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_tf_tokens_token_hash"),
        sa.CheckConstraint(
            f"scope IN ({', '.join(repr(s) for s in SCOPES)})", name="ck_tf_tokens_scope"
        ),
    )
    op.create_table(
        "tf_audit",
        sa.Column("id", sa.Integer, nullable=False),
        _ts("at", nullable=False),
        sa.Column(
            "token_id",
            sa.Integer,
            sa.ForeignKey("tf_tokens.id", name="fk_tf_audit_token_id_tf_tokens"),
            nullable=True,
        ),
        sa.Column("team", sa.String(200), nullable=True),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(200), nullable=True),
        sa.Column("detail", sa.JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_tf_audit"),
    )
    op.create_index("ix_tf_audit_at", "tf_audit", ["at"])


def downgrade() -> None:
    """Drops tokens, audit, leases and priorities; provisional verdicts become ordinary rows."""
    op.drop_index("ix_tf_audit_at", table_name="tf_audit")
    op.drop_table("tf_audit")
    op.drop_table("tf_tokens")
    op.drop_column("tf_trials", "provisional")
    op.drop_index("ix_tf_jobs_lease_owner", table_name="tf_jobs")
    op.drop_index("ix_tf_jobs_queue", table_name="tf_jobs")
    for column in ("heartbeat_at", "lease_expires_at", "lease_owner", "priority"):
        op.drop_column("tf_jobs", column)

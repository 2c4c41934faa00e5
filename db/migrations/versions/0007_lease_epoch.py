"""Fenced leases: a job's lease carries an epoch that every acquisition raises.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-08

``tf_jobs`` gains ``lease_epoch`` (an integer, 0 for a job never leased): each acquisition or
takeover of the lease increments it, and every write of a driver first checks, in its own
transaction, that the job's owner and epoch are still the ones it took, so a driver whose lease
was taken over writes nothing more. Rows written before this revision start at 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD/DROP COLUMN on both backends: a batch copy of tf_jobs on SQLite would drop a
    # table that studies and trials refer to.
    op.add_column(
        "tf_jobs", sa.Column("lease_epoch", sa.Integer(), nullable=False, server_default="0")
    )


def downgrade() -> None:
    """Drops the epochs: the older schema fences nothing."""
    op.drop_column("tf_jobs", "lease_epoch")

"""Best configs carry the verdict of their last revalidation: a stored best that regressed (or no
longer runs) after a Triton, torch or driver upgrade is marked in the database.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

``tf_best_configs`` gains ``revalidation`` (holds, regressed or failed; NULL: never revalidated,
or tuned since), ``revalidated_at``, ``revalidated_ms`` (the re-timed median; NULL when it
failed) and ``revalidated_environment_id`` (the environment it was re-timed in). Rows written
before this revision were never revalidated: every new column is NULL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATES = ("holds", "regressed", "failed")
CHECK = f"revalidation IN ({', '.join(repr(v) for v in STATES)})"
ENV_FK = "fk_tf_best_configs_revalidated_environment_id_tf_environments"


def upgrade() -> None:
    # A batch copy on SQLite (nothing refers to tf_best_configs), plain ALTERs elsewhere.
    with op.batch_alter_table("tf_best_configs") as batch:
        batch.add_column(sa.Column("revalidation", sa.String(16), nullable=True))
        batch.add_column(sa.Column("revalidated_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("revalidated_ms", sa.Double(), nullable=True))
        batch.add_column(sa.Column("revalidated_environment_id", sa.Integer(), nullable=True))
        batch.create_check_constraint("ck_tf_best_configs_revalidation", CHECK)
        batch.create_foreign_key(ENV_FK, "tf_environments", ["revalidated_environment_id"], ["id"])


def downgrade() -> None:
    """Drops the marks: the older schema has no place for them (a re-run of revalidate restores
    them)."""
    with op.batch_alter_table("tf_best_configs") as batch:
        batch.drop_constraint(ENV_FK, type_="foreignkey")
        batch.drop_constraint("ck_tf_best_configs_revalidation", type_="check")
        batch.drop_column("revalidated_environment_id")
        batch.drop_column("revalidated_ms")
        batch.drop_column("revalidated_at")
        batch.drop_column("revalidation")

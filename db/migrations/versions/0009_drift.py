"""Configs that stay right: revalidation jobs, the drift history of stored bests, and the stacks
workers reported.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-09

``tf_jobs`` gains ``kind`` (``tune`` or ``revalidate``; every job before this revision tuned).
``tf_retimings`` keeps every re-timing of a stored best config (its drift history): when, by which
job, in which environment, the verdict (holds, regressed, failed), the stored and re-timed
times, the vendor path's re-timed time, the row's noise floor, and what changed in the stack.
``tf_stack_marks`` keeps each (device class, environment) a live worker reported, first and last
seen: a class's newest mark is the stack its stored bests are checked against.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATES = ("holds", "regressed", "failed")


def upgrade() -> None:
    # A plain ADD COLUMN on both backends: a batch copy of tf_jobs on SQLite would drop a table
    # that studies and trials refer to.
    op.add_column(
        "tf_jobs", sa.Column("kind", sa.String(16), nullable=False, server_default="tune")
    )
    op.create_table(
        "tf_retimings",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "best_id",
            sa.Integer(),
            sa.ForeignKey("tf_best_configs.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("tf_jobs.id"), nullable=True),
        sa.Column(
            "environment_id", sa.Integer(), sa.ForeignKey("tf_environments.id"), nullable=True
        ),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("stored_ms", sa.Double(), nullable=False),
        sa.Column("time_ms", sa.Double(), nullable=True),
        sa.Column("vendor_ms", sa.Double(), nullable=True),
        sa.Column("noise", sa.Double(), nullable=True),
        sa.Column("changed", sa.Text(), nullable=True),
        sa.CheckConstraint(
            f"state IN ({', '.join(repr(v) for v in STATES)})", name="ck_tf_retimings_state"
        ),
    )
    op.create_index("ix_tf_retimings_best", "tf_retimings", ["best_id", "id"])
    op.create_table(
        "tf_stack_marks",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "device_class_id", sa.Integer(), sa.ForeignKey("tf_device_classes.id"), nullable=False
        ),
        sa.Column(
            "environment_id", sa.Integer(), sa.ForeignKey("tf_environments.id"), nullable=False
        ),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("device_class_id", "environment_id", name="uq_tf_stack_marks_key"),
    )


def downgrade() -> None:
    """Drops the drift history, the stack marks and the job kinds: the older schema has no place
    for them (a revalidation job would read as a tuning job, so they are deleted first)."""
    op.drop_table("tf_stack_marks")
    op.drop_index("ix_tf_retimings_best", table_name="tf_retimings")
    op.drop_table("tf_retimings")
    op.execute("DELETE FROM tf_jobs WHERE kind = 'revalidate'")
    op.drop_column("tf_jobs", "kind")

"""Trials and best configs carry the timing objective; best configs are kept per objective.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01

Rows written before this revision were timed as single launches: they get ``kernel``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OBJECTIVES = ("kernel", "graph")
CHECK = f"objective IN ({', '.join(repr(v) for v in OBJECTIVES)})"
BEST_KEY = ["kernel_name", "kernel_version", "problem_key", "device_class_key", "triton_minor"]


def _objective() -> sa.Column[str]:
    return sa.Column("objective", sa.String(16), nullable=False, server_default="kernel")


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def upgrade() -> None:
    if _sqlite():
        # Not a batch copy of tf_trials: dropping the old table breaks tf_best_configs' foreign
        # key to it. SQLite adds a column with its own CHECK in place.
        op.execute(
            "ALTER TABLE tf_trials ADD COLUMN objective VARCHAR(16) DEFAULT 'kernel' NOT NULL "
            f"CONSTRAINT ck_tf_trials_objective CHECK ({CHECK})"
        )
    else:
        op.add_column("tf_trials", _objective())
        op.create_check_constraint("ck_tf_trials_objective", "tf_trials", CHECK)
    with op.batch_alter_table("tf_best_configs") as batch:
        batch.add_column(_objective())
        batch.create_check_constraint("ck_tf_best_configs_objective", CHECK)
        batch.drop_constraint("uq_tf_best_configs_key", type_="unique")
        batch.create_unique_constraint("uq_tf_best_configs_key", [*BEST_KEY, "objective"])


def downgrade() -> None:
    """Refused while graph-objective rows exist: the older schema would take them for kernel times."""
    bind = op.get_bind()
    for table in ("tf_trials", "tf_best_configs"):
        count = bind.scalar(sa.text(f"SELECT count(*) FROM {table} WHERE objective != 'kernel'"))
        if count:
            raise RuntimeError(
                f"{table} holds {count} graph-objective rows, which revision 0001 cannot tell from "
                "kernel-objective ones; delete them first or stay at 0002"
            )
    with op.batch_alter_table("tf_best_configs") as batch:
        batch.drop_constraint("uq_tf_best_configs_key", type_="unique")
        batch.create_unique_constraint("uq_tf_best_configs_key", BEST_KEY)
        batch.drop_constraint("ck_tf_best_configs_objective", type_="check")
        batch.drop_column("objective")
    if _sqlite():  # in place, as upgrade added it (a column CHECK goes with its column)
        op.execute("ALTER TABLE tf_trials DROP COLUMN objective")
    else:
        op.drop_constraint("ck_tf_trials_objective", "tf_trials", type_="check")
        op.drop_column("tf_trials", "objective")

"""Best configs are keyed by their device class's row, as trials and studies are.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-10

``tf_best_configs`` gains ``device_class_id`` (a foreign key to ``tf_device_classes``), filled
from the row's ``device_class_key``; the unique key ``uq_tf_best_configs_key`` names the id in
the key's place, and ``device_class_key`` is dropped (the key is read through the class). A best
row whose key names no class (a row written by hand, or by a tool that never stored the class)
gets a class of that key first: vendor and arch empty, its name the key, marked replay when the
key says so (``replay:...``). Downgrade restores the key column from the class rows and keeps the
classes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "tf_best_configs"
UNIQUE = "uq_tf_best_configs_key"
FK = "fk_tf_best_configs_device_class_id_tf_device_classes"
OLD_KEY = (
    "kernel_name",
    "kernel_version",
    "problem_key",
    "device_class_key",
    "triton_minor",
    "objective",
)
NEW_KEY = tuple("device_class_id" if c == "device_class_key" else c for c in OLD_KEY)


def upgrade() -> None:
    op.execute(
        "INSERT INTO tf_device_classes (key, vendor, name, arch, replay) "
        "SELECT DISTINCT b.device_class_key, '', b.device_class_key, '', "
        "b.device_class_key LIKE 'replay:%' FROM tf_best_configs b "
        "WHERE NOT EXISTS (SELECT 1 FROM tf_device_classes d WHERE d.key = b.device_class_key)"
    )
    # Adding a nullable column is a plain ALTER on both backends; the batch below is a copy of
    # the table on SQLite (nothing refers to tf_best_configs), plain ALTERs elsewhere.
    op.add_column(TABLE, sa.Column("device_class_id", sa.Integer(), nullable=True))
    op.execute(
        "UPDATE tf_best_configs SET device_class_id = (SELECT d.id FROM tf_device_classes d "
        "WHERE d.key = tf_best_configs.device_class_key)"
    )
    with op.batch_alter_table(TABLE) as batch:
        batch.alter_column("device_class_id", existing_type=sa.Integer(), nullable=False)
        batch.create_foreign_key(FK, "tf_device_classes", ["device_class_id"], ["id"])
        batch.drop_constraint(UNIQUE, type_="unique")
        batch.create_unique_constraint(UNIQUE, list(NEW_KEY))
        batch.drop_column("device_class_key")


def downgrade() -> None:
    """Keys the rows by their class's key again (the classes stay)."""
    op.add_column(TABLE, sa.Column("device_class_key", sa.String(200), nullable=True))
    op.execute(
        "UPDATE tf_best_configs SET device_class_key = (SELECT d.key FROM tf_device_classes d "
        "WHERE d.id = tf_best_configs.device_class_id)"
    )
    with op.batch_alter_table(TABLE) as batch:
        batch.alter_column("device_class_key", existing_type=sa.String(200), nullable=False)
        batch.drop_constraint(UNIQUE, type_="unique")
        batch.create_unique_constraint(UNIQUE, list(OLD_KEY))
        batch.drop_constraint(FK, type_="foreignkey")
        batch.drop_column("device_class_id")

"""The vendor path is a competitor: its measurements are kept beside the trials, and a best
config says which backend won its key.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06

``tf_vendor_trials`` holds each measurement of a kernel spec's vendor path (``torch.matmul``, an
SDPA backend, ...) on a problem and device class, in an environment, under a timing objective:
the same outcome, samples and error fields as a trial, keyed by the kernel's name (a library
path does not change with the kernel's version). ``tf_best_configs`` gains ``backend`` (``triton``
or ``vendor``), ``vendor`` (the path's name), the final re-timing's ``triton_ms``, ``vendor_ms``
and ``default_ms``, and ``noise`` (its relative noise floor). Rows written before this revision
are Triton wins with no vendor comparison: ``backend`` is ``triton``, the rest NULL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BACKENDS = ("triton", "vendor")
OUTCOMES = (
    "ok",
    "invalid",
    "wrong",
    "compile_error",
    "compile_timeout",
    "run_timeout",
    "crash",
    "infra",
)
OBJECTIVES = ("kernel", "graph")


def _in(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    op.create_table(
        "tf_vendor_trials",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("tf_jobs.id"), nullable=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("tf_studies.id"), nullable=True),
        sa.Column("kernel_name", sa.String(200), nullable=False),
        sa.Column("problem_key", sa.Text(), nullable=False),
        sa.Column(
            "device_class_id", sa.Integer(), sa.ForeignKey("tf_device_classes.id"), nullable=False
        ),
        sa.Column(
            "environment_id", sa.Integer(), sa.ForeignKey("tf_environments.id"), nullable=True
        ),
        sa.Column("objective", sa.String(16), nullable=False, server_default="kernel"),
        sa.Column("vendor", sa.String(64), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("samples_ms", sa.JSON(), nullable=True),
        sa.Column("median_ms", sa.Double(), nullable=True),
        sa.Column("iqr_ms", sa.Double(), nullable=True),
        sa.Column("max_rel_error", sa.Double(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("worker", sa.String(200), nullable=True),
        sa.Column("host", sa.String(200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(_in("outcome", OUTCOMES), name="ck_tf_vendor_trials_outcome"),
        sa.CheckConstraint(_in("objective", OBJECTIVES), name="ck_tf_vendor_trials_objective"),
    )
    op.create_index(
        "ix_tf_vendor_trials_key",
        "tf_vendor_trials",
        ["kernel_name", "problem_key", "device_class_id", "objective", "vendor", "id"],
    )
    op.create_index("ix_tf_vendor_trials_study_id", "tf_vendor_trials", ["study_id"])
    with op.batch_alter_table("tf_best_configs") as batch:
        batch.add_column(
            sa.Column("backend", sa.String(16), nullable=False, server_default="triton")
        )
        batch.add_column(sa.Column("vendor", sa.String(64), nullable=True))
        batch.add_column(sa.Column("triton_ms", sa.Double(), nullable=True))
        batch.add_column(sa.Column("vendor_ms", sa.Double(), nullable=True))
        batch.add_column(sa.Column("default_ms", sa.Double(), nullable=True))
        batch.add_column(sa.Column("noise", sa.Double(), nullable=True))
        batch.create_check_constraint("ck_tf_best_configs_backend", _in("backend", BACKENDS))


def downgrade() -> None:
    """Drops the vendor measurements and the backend columns: the older schema has no place for
    them (a vendor win becomes its stored Triton config again)."""
    with op.batch_alter_table("tf_best_configs") as batch:
        batch.drop_constraint("ck_tf_best_configs_backend", type_="check")
        for column in ("noise", "default_ms", "vendor_ms", "triton_ms", "vendor", "backend"):
            batch.drop_column(column)
    op.drop_index("ix_tf_vendor_trials_study_id", table_name="tf_vendor_trials")
    op.drop_index("ix_tf_vendor_trials_key", table_name="tf_vendor_trials")
    op.drop_table("tf_vendor_trials")

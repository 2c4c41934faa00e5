"""Create tunefleet's tables.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_STATUSES = ("queued", "running", "done", "failed", "cancelled")
STUDY_STATUSES = ("running", "done", "failed", "cancelled")
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


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.Integer, primary_key=True)


def _fk(owner: str, column: str, target: str, *, nullable: bool = False) -> sa.Column[int]:
    return sa.Column(
        column,
        sa.Integer,
        sa.ForeignKey(f"{target}.id", name=f"fk_{owner}_{column}_{target}"),
        nullable=nullable,
    )


def _ts(name: str, *, nullable: bool) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "tf_device_classes",
        _id(),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("vendor", sa.String(32), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("arch", sa.String(64), nullable=False),
        sa.Column("replay", sa.Boolean, nullable=False),
        sa.Column("limits", sa.JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_tf_device_classes"),
        sa.UniqueConstraint("key", name="uq_tf_device_classes_key"),
    )
    op.create_table(
        "tf_kernels",
        _id(),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("version_hash", sa.String(64), nullable=False),
        sa.Column("space_hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tf_kernels"),
        sa.UniqueConstraint("name", "version_hash", name="uq_tf_kernels_name_version_hash"),
    )
    op.create_table(
        "tf_environments",
        _id(),
        _fk("tf_environments", "device_class_id", "tf_device_classes"),
        sa.Column("driver", sa.String(64), nullable=False),
        sa.Column("runtime", sa.String(64), nullable=False),
        sa.Column("triton_version", sa.String(64), nullable=False),
        sa.Column("torch_version", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tf_environments"),
        sa.UniqueConstraint(
            "device_class_id",
            "driver",
            "runtime",
            "triton_version",
            "torch_version",
            name="uq_tf_environments_identity",
        ),
    )
    op.create_table(
        "tf_jobs",
        _id(),
        _fk("tf_jobs", "kernel_id", "tf_kernels"),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("team", sa.String(200), nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        _ts("created_at", nullable=False),
        _ts("started_at", nullable=True),
        _ts("finished_at", nullable=True),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tf_jobs"),
        sa.CheckConstraint(_in("status", JOB_STATUSES), name="ck_tf_jobs_status"),
    )
    op.create_table(
        "tf_studies",
        _id(),
        _fk("tf_studies", "job_id", "tf_jobs"),
        _fk("tf_studies", "kernel_id", "tf_kernels"),
        sa.Column("problem_key", sa.Text, nullable=False),
        sa.Column("problem", sa.JSON, nullable=False),
        _fk("tf_studies", "device_class_id", "tf_device_classes"),
        sa.Column("sampler", sa.String(64), nullable=False),
        sa.Column("optuna_study_name", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tf_studies"),
        sa.UniqueConstraint("job_id", "problem_key", "device_class_id", name="uq_tf_studies_key"),
        sa.CheckConstraint(_in("status", STUDY_STATUSES), name="ck_tf_studies_status"),
    )
    op.create_table(
        "tf_trials",
        _id(),
        _fk("tf_trials", "job_id", "tf_jobs", nullable=True),
        _fk("tf_trials", "study_id", "tf_studies", nullable=True),
        _fk("tf_trials", "kernel_id", "tf_kernels"),
        sa.Column("problem_key", sa.Text, nullable=False),
        _fk("tf_trials", "device_class_id", "tf_device_classes"),
        _fk("tf_trials", "environment_id", "tf_environments", nullable=True),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("config_key", sa.Text, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("samples_ms", sa.JSON, nullable=True),
        sa.Column("median_ms", sa.Double, nullable=True),
        sa.Column("iqr_ms", sa.Double, nullable=True),
        sa.Column("max_rel_error", sa.Double, nullable=True),
        sa.Column("compile_s", sa.Double, nullable=True),
        sa.Column("run_s", sa.Double, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("worker", sa.String(200), nullable=True),
        sa.Column("host", sa.String(200), nullable=True),
        sa.Column("reused", sa.Boolean, nullable=False),
        _ts("created_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tf_trials"),
        sa.CheckConstraint(_in("outcome", OUTCOMES), name="ck_tf_trials_outcome"),
    )
    op.create_index(
        "ix_tf_trials_measured",
        "tf_trials",
        ["kernel_id", "problem_key", "device_class_id", "config_key"],
    )
    op.create_index("ix_tf_trials_study_id", "tf_trials", ["study_id"])
    op.create_table(
        "tf_best_configs",
        _id(),
        sa.Column("kernel_name", sa.String(200), nullable=False),
        sa.Column("kernel_version", sa.String(64), nullable=False),
        sa.Column("problem_key", sa.Text, nullable=False),
        sa.Column("device_class_key", sa.String(200), nullable=False),
        sa.Column("triton_minor", sa.String(16), nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("time_ms", sa.Double, nullable=False),
        _fk("tf_best_configs", "trial_id", "tf_trials", nullable=True),
        _fk("tf_best_configs", "job_id", "tf_jobs", nullable=True),
        _fk("tf_best_configs", "environment_id", "tf_environments", nullable=True),
        _ts("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tf_best_configs"),
        sa.UniqueConstraint(
            "kernel_name",
            "kernel_version",
            "problem_key",
            "device_class_key",
            "triton_minor",
            name="uq_tf_best_configs_key",
        ),
    )


def downgrade() -> None:
    op.drop_table("tf_best_configs")
    op.drop_index("ix_tf_trials_study_id", table_name="tf_trials")
    op.drop_index("ix_tf_trials_measured", table_name="tf_trials")
    op.drop_table("tf_trials")
    op.drop_table("tf_studies")
    op.drop_table("tf_jobs")
    op.drop_table("tf_environments")
    op.drop_table("tf_kernels")
    op.drop_table("tf_device_classes")

"""Indexes for a database of millions of trials: dedupe, warm start, job progress and job pages
read indexes, not trial rows.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

Measured on 10 million trial rows (benchmarks/db_at_size.py; the results and plans are under
benchmarks/results/db_at_size/2026-12-01-cpu/):

* ``ix_tf_trials_measured`` gains ``id`` as its last key column and, on PostgreSQL, carries
  (INCLUDE) objective, outcome, provisional and median: the dedupe lookup (the newest verdict of
  one config) walks it backwards and stops at the first row; warm start picks each config's
  oldest verdict of a key from the index alone (``repository.measured_for_key``), then reads only
  those rows, where it read every trial of the key (tens of thousands on a popular key).
* ``ix_tf_trials_study_counts`` replaces ``ix_tf_trials_study_id``: the same leading column, and on
  PostgreSQL it carries (INCLUDE) what a study's progress counts read (outcome, reused,
  provisional, median), so outcome counts and the job pages' per-study counts are index-only
  scans instead of a heap visit per trial. SQLite has no INCLUDE: there it is ``(study_id)``.
* ``ix_tf_jobs_team`` (team, id) and ``ix_tf_jobs_kernel`` (kernel_id, id): a team's or a
  kernel's job page, newest first, and its count, without scanning every job.

Building them on a large PostgreSQL table takes minutes (the upgrade holds the table's write
lock while it runs); the benchmark's manifest says how long it took there.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MEASURED_KEY = ["kernel_id", "problem_key", "device_class_id", "config_key"]
MEASURED_INCLUDE = ["objective", "outcome", "provisional", "median_ms"]
STUDY_COUNTS_INCLUDE = ["outcome", "reused", "provisional", "median_ms"]


def upgrade() -> None:
    op.drop_index("ix_tf_trials_measured", table_name="tf_trials")
    op.create_index(
        "ix_tf_trials_measured",
        "tf_trials",
        [*MEASURED_KEY, "id"],
        postgresql_include=MEASURED_INCLUDE,
    )
    op.create_index(
        "ix_tf_trials_study_counts",
        "tf_trials",
        ["study_id"],
        postgresql_include=STUDY_COUNTS_INCLUDE,
    )
    op.drop_index("ix_tf_trials_study_id", table_name="tf_trials")
    op.create_index("ix_tf_jobs_team", "tf_jobs", ["team", "id"])
    op.create_index("ix_tf_jobs_kernel", "tf_jobs", ["kernel_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_tf_jobs_kernel", table_name="tf_jobs")
    op.drop_index("ix_tf_jobs_team", table_name="tf_jobs")
    op.create_index("ix_tf_trials_study_id", "tf_trials", ["study_id"])
    op.drop_index("ix_tf_trials_study_counts", table_name="tf_trials")
    op.drop_index("ix_tf_trials_measured", table_name="tf_trials")
    op.create_index("ix_tf_trials_measured", "tf_trials", MEASURED_KEY)

"""SQLAlchemy 2.0 models of tunefleet's tables.

The schema itself is created and changed only by the Alembic migrations in ``db/migrations``; these
models must describe exactly what the migrations build (a test compares them). Table names carry the
``tf_`` prefix because Optuna's RDB storage, which may share the database, owns ``studies`` and
``trials``.
Text and JSON columns have the :mod:`db.text` types: every string written is storable on both
backends (NUL and lone surrogates escaped, cut to the column's length).
"""

from __future__ import annotations

import enum
from datetime import datetime, timezone
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from db.clock import CLOCK_OFFSET_ENV as CLOCK_OFFSET_ENV
from db.clock import utcnow as utcnow
from db.states import (
    JOB_TRANSITIONS as JOB_TRANSITIONS,
)
from db.states import (
    RETRYABLE_OUTCOMES as RETRYABLE_OUTCOMES,
)
from db.states import (
    BestBackend,
    JobKind,
    JobStatus,
    Objective,
    RevalidationState,
    StudyStatus,
    TokenScope,
    TrialOutcome,
)
from db.text import StoredJSON, StoredString, StoredText

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back timezone-aware (SQLite drops the zone)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


def _in_check(column: str, enum_type: type[enum.Enum]) -> str:
    return f"{column} IN ({', '.join(repr(m.value) for m in enum_type)})"


def _enum_column(enum_type: type[enum.Enum]) -> sa.Enum:
    # The CHECK constraint is declared by hand in __table_args__ so that its name and text match
    # the migration exactly.
    return sa.Enum(
        enum_type,
        native_enum=False,
        create_constraint=False,
        length=16,
        values_callable=lambda e: [m.value for m in e],
        validate_strings=True,
    )


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        float: sa.Double(),
        dict[str, Any]: StoredJSON(),
    }


class DeviceClass(Base):
    """A kind of device results are kept for, e.g. key ``NVIDIA H200``, ``cpu``, ``replay:NVIDIA H200``."""

    __tablename__ = "tf_device_classes"

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(StoredString(200), unique=True)
    vendor: Mapped[str] = mapped_column(StoredString(32))
    name: Mapped[str] = mapped_column(StoredString(200))
    arch: Mapped[str] = mapped_column(StoredString(64))
    replay: Mapped[bool] = mapped_column(default=False)
    limits: Mapped[dict[str, Any] | None]


class Environment(Base):
    """The software a measurement ran under on a device class."""

    __tablename__ = "tf_environments"
    __table_args__ = (
        sa.UniqueConstraint(
            "device_class_id",
            "driver",
            "runtime",
            "triton_version",
            "torch_version",
            name="uq_tf_environments_identity",
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    device_class_id: Mapped[int] = mapped_column(sa.ForeignKey("tf_device_classes.id"))
    driver: Mapped[str] = mapped_column(StoredString(64))
    runtime: Mapped[str] = mapped_column(StoredString(64))
    triton_version: Mapped[str] = mapped_column(StoredString(64))
    torch_version: Mapped[str] = mapped_column(StoredString(64))


class Kernel(Base):
    """One version of a kernel: ``version_hash`` covers its source and its search space."""

    __tablename__ = "tf_kernels"
    __table_args__ = (sa.UniqueConstraint("name", "version_hash"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(StoredString(200))
    version_hash: Mapped[str] = mapped_column(StoredString(64))
    space_hash: Mapped[str] = mapped_column(StoredString(64))


class Job(Base):
    """A request to tune one kernel version; ``spec`` is the job spec exactly as given."""

    __tablename__ = "tf_jobs"
    __table_args__ = (
        sa.CheckConstraint(_in_check("status", JobStatus), name="status"),
        sa.Index("ix_tf_jobs_queue", "status", "priority", "created_at"),
        sa.Index("ix_tf_jobs_lease_owner", "lease_owner"),
        sa.Index("ix_tf_jobs_team", "team", "id"),
        sa.Index("ix_tf_jobs_kernel", "kernel_id", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kernel_id: Mapped[int] = mapped_column(sa.ForeignKey("tf_kernels.id"))
    status: Mapped[JobStatus] = mapped_column(_enum_column(JobStatus), default=JobStatus.QUEUED)
    spec: Mapped[dict[str, Any]]
    team: Mapped[str | None] = mapped_column(StoredString(200))
    error: Mapped[str | None] = mapped_column(StoredText)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    #: Higher runs first; among equals the older job.
    priority: Mapped[int] = mapped_column(default=0, server_default="0")
    #: Who runs the job now (a driver or scheduler id) and until when (the database's clock),
    #: unless renewed; the epoch is raised by every acquisition, and every write of the owner
    #: checks that owner and epoch are still its own (db.repository.check_lease).
    lease_owner: Mapped[str | None] = mapped_column(StoredString(200))
    lease_expires_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    lease_epoch: Mapped[int] = mapped_column(default=0, server_default="0")
    #: What the job does (see JobKind); every job before revision 0009 tuned. (No CHECK: adding
    #: one to tf_jobs on SQLite needs a table copy that would drop the rows referring to it.)
    kind: Mapped[JobKind] = mapped_column(
        _enum_column(JobKind), default=JobKind.TUNE, server_default=JobKind.TUNE.value
    )


class Study(Base):
    """The search of one job for one (problem, device class); bound to an Optuna study by name."""

    __tablename__ = "tf_studies"
    __table_args__ = (
        sa.UniqueConstraint("job_id", "problem_key", "device_class_id", name="uq_tf_studies_key"),
        sa.CheckConstraint(_in_check("status", StudyStatus), name="status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(sa.ForeignKey("tf_jobs.id"))
    kernel_id: Mapped[int] = mapped_column(sa.ForeignKey("tf_kernels.id"))
    problem_key: Mapped[str] = mapped_column(StoredText)
    problem: Mapped[dict[str, Any]]
    device_class_id: Mapped[int] = mapped_column(sa.ForeignKey("tf_device_classes.id"))
    sampler: Mapped[str] = mapped_column(StoredString(64))
    optuna_study_name: Mapped[str] = mapped_column(StoredString(255))
    status: Mapped[StudyStatus] = mapped_column(
        _enum_column(StudyStatus), default=StudyStatus.RUNNING
    )


class Trial(Base):
    """One measured (or failed) config, with its provenance. Times in ms except ``*_s``."""

    __tablename__ = "tf_trials"
    __table_args__ = (
        # Dedupe lookups (newest verdict of a config) and warm start (each config's oldest) read
        # only this index on PostgreSQL.
        sa.Index(
            "ix_tf_trials_measured",
            "kernel_id",
            "problem_key",
            "device_class_id",
            "config_key",
            "id",
            postgresql_include=["objective", "outcome", "provisional", "median_ms"],
        ),
        # Covering on PostgreSQL: a study's progress counts read only the index.
        sa.Index(
            "ix_tf_trials_study_counts",
            "study_id",
            postgresql_include=["outcome", "reused", "provisional", "median_ms"],
        ),
        sa.CheckConstraint(_in_check("outcome", TrialOutcome), name="outcome"),
        sa.CheckConstraint(_in_check("objective", Objective), name="objective"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tf_jobs.id"))
    study_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tf_studies.id"))
    kernel_id: Mapped[int] = mapped_column(sa.ForeignKey("tf_kernels.id"))
    problem_key: Mapped[str] = mapped_column(StoredText)
    device_class_id: Mapped[int] = mapped_column(sa.ForeignKey("tf_device_classes.id"))
    environment_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tf_environments.id"))
    config: Mapped[dict[str, Any]]
    config_key: Mapped[str] = mapped_column(StoredText)
    outcome: Mapped[TrialOutcome] = mapped_column(_enum_column(TrialOutcome))
    objective: Mapped[Objective] = mapped_column(
        _enum_column(Objective), default=Objective.KERNEL, server_default=Objective.KERNEL.value
    )
    samples_ms: Mapped[list[float] | None] = mapped_column(StoredJSON)
    median_ms: Mapped[float | None]
    iqr_ms: Mapped[float | None]
    max_rel_error: Mapped[float | None]
    compile_s: Mapped[float | None]
    run_s: Mapped[float | None]
    error: Mapped[str | None] = mapped_column(StoredText)
    worker: Mapped[str | None] = mapped_column(StoredString(200))
    host: Mapped[str | None] = mapped_column(StoredString(200))
    reused: Mapped[bool] = mapped_column(default=False)
    #: A retryable verdict kept for the record until a re-measurement gives the config's own;
    #: never reused as a measurement.
    provisional: Mapped[bool] = mapped_column(default=False, server_default=sa.false())
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


#: The columns that name a best config: one row per value of them.
BEST_KEY = (
    "kernel_name",
    "kernel_version",
    "problem_key",
    "device_class_id",
    "triton_minor",
    "objective",
)


class BestConfig(Base):
    """The fastest known config per (kernel, version, problem, device class, triton major.minor,
    objective); the device class is a row of ``tf_device_classes``, as a trial's is."""

    __tablename__ = "tf_best_configs"
    __table_args__ = (
        sa.UniqueConstraint(*BEST_KEY, name="uq_tf_best_configs_key"),
        sa.CheckConstraint(_in_check("objective", Objective), name="objective"),
        sa.CheckConstraint(_in_check("revalidation", RevalidationState), name="revalidation"),
        sa.CheckConstraint(_in_check("backend", BestBackend), name="backend"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kernel_name: Mapped[str] = mapped_column(StoredString(200))
    kernel_version: Mapped[str] = mapped_column(StoredString(64))
    problem_key: Mapped[str] = mapped_column(StoredText)
    device_class_id: Mapped[int] = mapped_column(sa.ForeignKey("tf_device_classes.id"))
    triton_minor: Mapped[str] = mapped_column(StoredString(16))
    objective: Mapped[Objective] = mapped_column(
        _enum_column(Objective), default=Objective.KERNEL, server_default=Objective.KERNEL.value
    )
    config: Mapped[dict[str, Any]]
    time_ms: Mapped[float]
    trial_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tf_trials.id"))
    job_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tf_jobs.id"))
    environment_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tf_environments.id"))
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    #: The last ``tunefleet revalidate`` of this config (None: never, or tuned since): its
    #: verdict, when, the re-timed median (None when it failed) and the environment it ran in.
    revalidation: Mapped[RevalidationState | None] = mapped_column(_enum_column(RevalidationState))
    revalidated_at: Mapped[datetime | None]
    revalidated_ms: Mapped[float | None]
    revalidated_environment_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("tf_environments.id")
    )
    #: Which backend won the key in the final paired re-timing (see BestBackend); the times of
    #: that re-timing (None: not measured) and its relative noise floor.
    backend: Mapped[BestBackend] = mapped_column(
        _enum_column(BestBackend),
        default=BestBackend.TRITON,
        server_default=BestBackend.TRITON.value,
    )
    vendor: Mapped[str | None] = mapped_column(StoredString(64))
    triton_ms: Mapped[float | None]
    vendor_ms: Mapped[float | None]
    default_ms: Mapped[float | None]
    noise: Mapped[float | None]


class VendorTrial(Base):
    """One measurement of a kernel spec's vendor path on a problem and device class, in an
    environment, under an objective; fields as a Trial's. Keyed by the kernel's name: a library
    path does not change with the kernel's version."""

    __tablename__ = "tf_vendor_trials"
    __table_args__ = (
        sa.Index(
            "ix_tf_vendor_trials_key",
            "kernel_name",
            "problem_key",
            "device_class_id",
            "objective",
            "vendor",
            "id",
        ),
        sa.Index("ix_tf_vendor_trials_study_id", "study_id"),
        sa.CheckConstraint(_in_check("outcome", TrialOutcome), name="outcome"),
        sa.CheckConstraint(_in_check("objective", Objective), name="objective"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tf_jobs.id"))
    study_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tf_studies.id"))
    kernel_name: Mapped[str] = mapped_column(StoredString(200))
    problem_key: Mapped[str] = mapped_column(StoredText)
    device_class_id: Mapped[int] = mapped_column(sa.ForeignKey("tf_device_classes.id"))
    environment_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tf_environments.id"))
    objective: Mapped[Objective] = mapped_column(
        _enum_column(Objective), default=Objective.KERNEL, server_default=Objective.KERNEL.value
    )
    vendor: Mapped[str] = mapped_column(StoredString(64))
    outcome: Mapped[TrialOutcome] = mapped_column(_enum_column(TrialOutcome))
    samples_ms: Mapped[list[float] | None] = mapped_column(StoredJSON)
    median_ms: Mapped[float | None]
    iqr_ms: Mapped[float | None]
    max_rel_error: Mapped[float | None]
    error: Mapped[str | None] = mapped_column(StoredText)
    worker: Mapped[str | None] = mapped_column(StoredString(200))
    host: Mapped[str | None] = mapped_column(StoredString(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Token(Base):
    """An API token of a team; only the SHA-256 hex of the token itself is stored."""

    __tablename__ = "tf_tokens"
    __table_args__ = (sa.CheckConstraint(_in_check("scope", TokenScope), name="scope"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    team: Mapped[str] = mapped_column(StoredString(200))
    scope: Mapped[TokenScope] = mapped_column(_enum_column(TokenScope))
    token_hash: Mapped[str] = mapped_column(StoredString(64), unique=True)
    name: Mapped[str | None] = mapped_column(StoredString(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]


class AuditEntry(Base):
    """One state-changing request: who (token, team) did what (action) to what (target)."""

    __tablename__ = "tf_audit"
    __table_args__ = (sa.Index("ix_tf_audit_at", "at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    token_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tf_tokens.id"))
    team: Mapped[str | None] = mapped_column(StoredString(200))
    action: Mapped[str] = mapped_column(StoredString(64))
    target: Mapped[str | None] = mapped_column(StoredString(200))
    detail: Mapped[dict[str, Any] | None]


class Retiming(Base):
    """One re-timing of a stored best config (its drift history): when, by which revalidation
    job, in which environment, the verdict, the time the row stored then and the re-timed one
    (None: it failed), the vendor path's re-timed time, the row's stored relative noise floor,
    and what changed in the stack since the best was measured (``changed``: one line)."""

    __tablename__ = "tf_retimings"
    __table_args__ = (
        sa.Index("ix_tf_retimings_best", "best_id", "id"),
        sa.CheckConstraint(_in_check("state", RevalidationState), name="state"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    best_id: Mapped[int] = mapped_column(sa.ForeignKey("tf_best_configs.id", ondelete="CASCADE"))
    job_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tf_jobs.id"))
    environment_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tf_environments.id"))
    at: Mapped[datetime] = mapped_column(default=utcnow)
    state: Mapped[RevalidationState] = mapped_column(_enum_column(RevalidationState))
    stored_ms: Mapped[float]
    time_ms: Mapped[float | None]
    vendor_ms: Mapped[float | None]
    noise: Mapped[float | None]
    changed: Mapped[str | None] = mapped_column(StoredText)


class StackMark(Base):
    """A software stack (environment) a live worker of a device class reported: first and last
    seen. A class's newest mark is the stack its stored bests are checked against."""

    __tablename__ = "tf_stack_marks"
    __table_args__ = (
        sa.UniqueConstraint("device_class_id", "environment_id", name="uq_tf_stack_marks_key"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    device_class_id: Mapped[int] = mapped_column(sa.ForeignKey("tf_device_classes.id"))
    environment_id: Mapped[int] = mapped_column(sa.ForeignKey("tf_environments.id"))
    first_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)

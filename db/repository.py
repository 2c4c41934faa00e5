"""Repository functions: every read and write of tunefleet's tables.

Each function takes an open :class:`~sqlalchemy.orm.Session` (from :meth:`db.Database.session`) and
neither commits nor rolls back: the caller's ``with db.session()`` block is the transaction. Reads
return frozen dataclass records (``*Record``), never ORM objects, so they stay valid after the
session closes. ``ensure_*`` functions are get-or-create and safe under concurrent callers.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import math
import secrets
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.errors import InvalidRecord, InvalidTransition, LeaseLost, NotFound
from db.models import (
    BEST_KEY,
    JOB_TRANSITIONS,
    RETRYABLE_OUTCOMES,
    AuditEntry,
    BestConfig,
    DeviceClass,
    Environment,
    Job,
    JobKind,
    JobStatus,
    Kernel,
    Objective,
    Retiming,
    StackMark,
    Study,
    StudyStatus,
    Token,
    TokenScope,
    Trial,
    TrialOutcome,
    VendorTrial,
    utcnow,
)
from db.states import STALE_STATES, BestBackend, RevalidationState
from db.text import StoredJSON, StoredString, StoredText

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_E = TypeVar("_E", bound=enum.Enum)
_R = TypeVar("_R", bound="DataclassInstance")
_Q = TypeVar("_Q", bound="sa.Select[Unpack[tuple[Any, ...]]]")


@dataclass(frozen=True)
class JobRecord:
    """A job row, with its kernel's name and version."""

    id: int
    kernel_id: int
    kernel_name: str
    kernel_version: str
    status: JobStatus
    spec: dict[str, Any]
    team: str | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested: bool
    priority: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    heartbeat_at: datetime | None
    lease_epoch: int
    kind: JobKind = JobKind.TUNE

    @property
    def objective(self) -> Objective:
        """What the job's times mean (a job stored before specs named one timed ``kernel``)."""
        return Objective(self.spec.get("objective", Objective.KERNEL.value))


@dataclass(frozen=True)
class TrialRecord:
    """A trial row. Times in ms except ``compile_s``/``run_s``."""

    id: int
    job_id: int | None
    study_id: int | None
    kernel_id: int
    problem_key: str
    device_class_id: int
    environment_id: int | None
    config: dict[str, Any]
    config_key: str
    outcome: TrialOutcome
    objective: Objective
    samples_ms: list[float] | None
    median_ms: float | None
    iqr_ms: float | None
    max_rel_error: float | None
    compile_s: float | None
    run_s: float | None
    error: str | None
    worker: str | None
    host: str | None
    reused: bool
    provisional: bool
    created_at: datetime


@dataclass(frozen=True)
class BestRecord:
    """A best-config row: the fastest known ``config`` for its key, ``time_ms`` its median;
    ``job_id`` and ``team`` say who produced it (None when unknown); ``revalidation`` and the
    ``revalidated_*`` fields the last ``tunefleet revalidate`` of it (None: never, or tuned since)."""

    id: int
    kernel_name: str
    kernel_version: str
    problem_key: str
    device_class_key: str
    triton_minor: str
    objective: Objective
    config: dict[str, Any]
    time_ms: float
    trial_id: int | None
    job_id: int | None
    environment_id: int | None
    updated_at: datetime
    team: str | None
    revalidation: RevalidationState | None = None
    revalidated_at: datetime | None = None
    revalidated_ms: float | None = None
    revalidated_environment_id: int | None = None
    #: Which backend won the key in the final paired re-timing: ``triton`` (``config``) or
    #: ``vendor`` (the library path ``vendor``; ``config`` is then the best Triton config and
    #: ``time_ms`` the vendor path's time); ``triton_ms``/``vendor_ms``/``default_ms`` the times
    #: of that re-timing and ``noise`` its relative noise floor (None: not measured).
    backend: BestBackend = BestBackend.TRITON
    vendor: str | None = None
    triton_ms: float | None = None
    vendor_ms: float | None = None
    default_ms: float | None = None
    noise: float | None = None

    @property
    def stale(self) -> bool:
        """The last revalidation found it regressed or failing here."""
        return self.revalidation in STALE_STATES


@dataclass(frozen=True)
class TokenRecord:
    """An API token row, without its hash."""

    id: int
    team: str
    scope: TokenScope
    name: str | None
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


@dataclass(frozen=True)
class AuditRecord:
    """One audit log entry."""

    id: int
    at: datetime
    token_id: int | None
    team: str | None
    action: str
    target: str | None
    detail: dict[str, Any] | None


@dataclass(frozen=True)
class DeviceClassRecord:
    """A device class row; ``limits`` is the class's DeviceLimits as a dict (vendor as its value)."""

    id: int
    key: str
    vendor: str
    name: str
    arch: str
    replay: bool
    limits: dict[str, Any] | None


@dataclass(frozen=True)
class EnvironmentRecord:
    """An environment row: the software versions a measurement ran under."""

    id: int
    device_class_id: int
    driver: str
    runtime: str
    triton_version: str
    torch_version: str


@dataclass(frozen=True)
class StudyRecord:
    """A study row, with the device class it searches on."""

    id: int
    job_id: int
    kernel_id: int
    problem_key: str
    problem: dict[str, Any]
    sampler: str
    optuna_study_name: str
    status: StudyStatus
    device_class: DeviceClassRecord


@dataclass(frozen=True)
class MeasuredRecord:
    """What warm start needs of one trial: its config, median time and outcome."""

    config: dict[str, Any]
    config_key: str
    median_ms: float | None
    outcome: TrialOutcome


@dataclass(frozen=True)
class VendorTrialRecord:
    """A vendor trial row: one measurement of a spec's vendor path ``vendor`` (times in ms)."""

    id: int
    job_id: int | None
    study_id: int | None
    kernel_name: str
    problem_key: str
    device_class_id: int
    environment_id: int | None
    objective: Objective
    vendor: str
    outcome: TrialOutcome
    samples_ms: list[float] | None
    median_ms: float | None
    iqr_ms: float | None
    max_rel_error: float | None
    error: str | None
    worker: str | None
    host: str | None
    created_at: datetime


def _record(record_type: type[_R], row: object, **extra: Any) -> _R:
    """A ``record_type`` from the ORM ``row``'s attributes of the same names, plus ``extra`` fields."""
    values = {f.name: getattr(row, f.name) for f in fields(record_type) if f.name not in extra}
    return record_type(**values, **extra)


def _get_or_create(
    s: Session,
    model: type[DeviceClass | Environment | Kernel | Study],
    key: Mapping[str, Any],
    **other: Any,
) -> int:
    """Id of the ``model`` row whose columns equal ``key``; if none, a new row of ``key`` + ``other``."""
    select = sa.select(model.id).where(*(getattr(model, k) == v for k, v in key.items()))
    existing = s.scalar(select)
    if existing is not None:
        return existing
    try:
        with s.begin_nested():
            row = model(**key, **other)
            s.add(row)
    except IntegrityError:
        # Another writer created the same row between our select and insert.
        found = s.scalar(select)
        if found is None:
            raise
        return found
    return cast(int, row.id)


def ensure_device_class(
    s: Session,
    key: str,
    vendor: str,
    name: str,
    arch: str,
    replay: bool = False,
    limits: Mapping[str, Any] | None = None,
) -> int:
    """Id of the device class ``key``, created with the other fields if new (an existing row is kept)."""
    return _get_or_create(
        s,
        DeviceClass,
        {"key": key},
        vendor=vendor,
        name=name,
        arch=arch,
        replay=replay,
        limits=dict(limits) if limits is not None else None,
    )


def ensure_environment(
    s: Session,
    device_class_id: int,
    driver: str,
    runtime: str,
    triton_version: str,
    torch_version: str,
) -> int:
    """Id of the environment with exactly these fields (use ``""`` for a field that does not apply)."""
    key = {
        "device_class_id": device_class_id,
        "driver": driver,
        "runtime": runtime,
        "triton_version": triton_version,
        "torch_version": torch_version,
    }
    return _get_or_create(s, Environment, key)


def device_class_by_key(s: Session, key: str) -> DeviceClassRecord | None:
    """The device class ``key`` (exact match), or None if there is none."""
    row = s.scalar(sa.select(DeviceClass).where(DeviceClass.key == key))
    return _record(DeviceClassRecord, row) if row is not None else None


def get_environment(s: Session, environment_id: int) -> EnvironmentRecord:
    """The environment ``environment_id``; raises NotFound if there is none."""
    env = s.get(Environment, environment_id)
    if env is None:
        raise NotFound(f"no environment {environment_id}")
    return _record(EnvironmentRecord, env)


def ensure_kernel(s: Session, name: str, version_hash: str, space_hash: str) -> int:
    """Id of kernel ``name`` at ``version_hash``, created with ``space_hash`` if new."""
    key = {"name": name, "version_hash": version_hash}
    return _get_or_create(s, Kernel, key, space_hash=space_hash)


def create_job(
    s: Session,
    kernel_id: int,
    spec: Mapping[str, Any],
    team: str | None,
    priority: int = 0,
    kind: JobKind = JobKind.TUNE,
) -> int:
    """Write a new ``queued`` job of ``kind`` with the spec exactly as given; return its id.

    ``priority``: higher is claimed first by :func:`claim_next_job`.
    """
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidRecord(f"job priority must be an integer, got {priority!r}")
    job = Job(
        kernel_id=kernel_id,
        spec=dict(spec),
        team=team,
        status=JobStatus.QUEUED,
        priority=priority,
        kind=_coerce(JobKind, kind, "job kind"),
    )
    s.add(job)
    s.flush()
    return job.id


def _job_row(s: Session, job_id: int, *, for_update: bool = False) -> Job:
    query = sa.select(Job).where(Job.id == job_id)
    if for_update:
        query = query.with_for_update()
    job = s.scalar(query)
    if job is None:
        raise NotFound(f"no job {job_id}; list jobs with `tunefleet jobs`")
    return job


def set_job_status(
    s: Session, job_id: int, status: JobStatus | str, error: str | None = None
) -> None:
    """Move job ``job_id`` to ``status`` along :data:`db.models.JOB_TRANSITIONS`.

    Entering ``running`` stamps ``started_at`` (first time only) and, on resume, clears the finish
    time, the error and any cancel request; entering done/failed/cancelled stamps ``finished_at``
    (``queued`` again, from ``running``: the job waits for a new owner, nothing is stamped).
    Raises InvalidTransition for a move the state machine forbids, NotFound for an unknown job.
    """
    target = _coerce(JobStatus, status, "job status")
    job = _job_row(s, job_id, for_update=True)
    if target not in JOB_TRANSITIONS[job.status]:
        raise InvalidTransition(f"job {job_id} cannot go from {job.status.value} to {target.value}")
    now = utcnow()
    if target is JobStatus.RUNNING:
        job.started_at = job.started_at or now
        job.finished_at = None
        job.cancel_requested = False
        job.error = None
    elif target is not JobStatus.QUEUED:
        job.finished_at = now
    if error is not None:
        job.error = error
    job.status = target
    s.flush()


def request_cancel(s: Session, job_id: int) -> None:
    """Flag job ``job_id`` for cancellation; its driver polls the flag and stops.

    Raises InvalidTransition if the job already finished, NotFound for an unknown job.
    """
    job = _job_row(s, job_id, for_update=True)
    if JobStatus.CANCELLED not in JOB_TRANSITIONS[job.status]:
        raise InvalidTransition(f"job {job_id} is already {job.status.value}; nothing to cancel")
    job.cancel_requested = True
    s.flush()


def _job_query() -> sa.Select[Job, str, str]:
    return sa.select(Job, Kernel.name, Kernel.version_hash).join(Kernel, Job.kernel_id == Kernel.id)


def _job_record(job: Job, kernel_name: str, kernel_version: str) -> JobRecord:
    return _record(JobRecord, job, kernel_name=kernel_name, kernel_version=kernel_version)


def get_job(s: Session, job_id: int) -> JobRecord:
    """The job ``job_id``; raises NotFound if there is none."""
    row = s.execute(_job_query().where(Job.id == job_id)).first()
    if row is None:
        raise NotFound(f"no job {job_id}; list jobs with `tunefleet jobs`")
    return _job_record(*row)


def cancel_requested(s: Session, job_id: int) -> bool:
    """Whether a cancel of job ``job_id`` was asked for (the one column a running driver polls);
    raises NotFound if there is no such job."""
    found = s.scalar(sa.select(Job.cancel_requested).where(Job.id == job_id))
    if found is None:
        raise NotFound(f"no job {job_id}; list jobs with `tunefleet jobs`")
    return bool(found)


def cancels_requested(s: Session, job_ids: Sequence[int]) -> set[int]:
    """Which of ``job_ids`` have a cancel asked for (a scheduler's poll of its running jobs, in
    one query)."""
    if not job_ids:
        return set()
    query = sa.select(Job.id).where(Job.id.in_(list(job_ids)), Job.cancel_requested.is_(True))
    return set(s.scalars(query))


def _job_filters(
    query: _Q, team: str | None, status: JobStatus | str | None, kernel: str | None
) -> _Q:
    if team is not None:
        query = query.where(Job.team == team)
    if status is not None:
        query = query.where(Job.status == _coerce(JobStatus, status, "job status"))
    if kernel is not None:
        query = query.where(Kernel.name == kernel)
    return query


def list_jobs(
    s: Session,
    *,
    team: str | None = None,
    status: JobStatus | str | None = None,
    kernel: str | None = None,
    limit: int = 50,
    offset: int = 0,
    before: int | None = None,
) -> list[JobRecord]:
    """Jobs matching every filter given (None: any; ``kernel`` is the kernel's name; ``before``:
    ids below it), newest first, ``limit`` of them after skipping ``offset``. Paging by
    ``before`` (the last id of the page before) reads as little deep in the table as on top."""
    if limit < 0 or offset < 0:
        raise InvalidRecord(f"limit={limit}, offset={offset}: both must be >= 0")
    # The page's ids first, then only their rows: an OFFSET deep in the table skips narrow index
    # entries, not job rows joined to their kernel (the last page of 22,000 jobs: 34 ms).
    ids = sa.select(Job.id)
    if kernel is not None:
        ids = ids.join(Kernel, Job.kernel_id == Kernel.id)
    if before is not None:
        ids = ids.where(Job.id < before)
    page = _job_filters(ids, team, status, kernel).order_by(Job.id.desc()).limit(limit)
    query = _job_query().where(Job.id.in_(page.offset(offset).scalar_subquery()))
    return [_job_record(*row) for row in s.execute(query.order_by(Job.id.desc())).all()]


def count_jobs(
    s: Session,
    *,
    team: str | None = None,
    status: JobStatus | str | None = None,
    kernel: str | None = None,
) -> int:
    """How many jobs :func:`list_jobs` with these filters would page through."""
    query = sa.select(sa.func.count(Job.id))
    if kernel is not None:  # joined only to filter: the join of every job cost more than the count
        query = query.join(Kernel, Job.kernel_id == Kernel.id)
    return s.scalar(_job_filters(query, team, status, kernel)) or 0


@dataclass(frozen=True)
class Lease:
    """A held lease on job ``job_id``: its owner and the epoch its acquisition set (the fencing
    token every write of the owner is checked against, :func:`check_lease`)."""

    job_id: int
    owner: str
    epoch: int


def db_now(s: Session | sa.Connection) -> datetime:
    """The database server's clock now, in UTC (PostgreSQL ``clock_timestamp()``, SQLite
    ``strftime('%f', 'now')``, to the millisecond): every lease time is stamped and compared on
    it, never on a host's clock, so hosts whose clocks differ agree on who holds a lease."""
    dialect = s.dialect if isinstance(s, sa.Connection) else s.get_bind().dialect
    if dialect.name == "sqlite":
        text = s.scalar(sa.select(sa.func.strftime("%Y-%m-%d %H:%M:%f", "now")))
        return datetime.strptime(str(text), "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc)
    found = s.scalar(sa.select(sa.func.clock_timestamp()))
    assert isinstance(found, datetime)
    return found.astimezone(timezone.utc)


def _lease_until(s: Session | sa.Connection, ttl_s: float) -> tuple[datetime, datetime]:
    if not (isinstance(ttl_s, int | float) and math.isfinite(ttl_s) and ttl_s > 0):
        raise InvalidRecord(f"lease ttl_s must be a finite positive number, got {ttl_s!r}")
    now = db_now(s)
    return now, now + timedelta(seconds=ttl_s)


def _check_owner(owner: str) -> None:
    if not isinstance(owner, str) or not owner or len(owner) > 200:
        raise InvalidRecord(f"lease owner must be a non-empty string of <= 200 chars: {owner!r}")


def _lease_live(job: Job, now: datetime) -> bool:
    return (
        job.lease_owner is not None
        and job.lease_expires_at is not None
        and job.lease_expires_at > now
    )


def _take_lease(job: Job, owner: str, now: datetime, until: datetime) -> Lease:
    job.lease_owner = owner
    job.lease_expires_at = until
    job.heartbeat_at = now
    job.lease_epoch = (job.lease_epoch or 0) + 1
    return Lease(job.id, owner, job.lease_epoch)


def acquire_lease(s: Session, job_id: int, owner: str, ttl_s: float) -> Lease | None:
    """Take job ``job_id``'s lease for ``ttl_s`` seconds (the database's clock) if it has none,
    it expired or ``owner`` already holds it, raising its epoch (so a driver of the same owner
    that held it before writes nothing more); None (nothing changed) while another owner's
    lease is live.

    The row is locked for the check (SQLite: the session's write lock), so two owners never both
    win. Raises NotFound for an unknown job.
    """
    _check_owner(owner)
    now, until = _lease_until(s, ttl_s)
    job = _job_row(s, job_id, for_update=True)
    if _lease_live(job, now) and job.lease_owner != owner:
        return None
    lease = _take_lease(job, owner, now, until)
    s.flush()
    return lease


def _held(lease: Lease) -> sa.ColumnElement[bool]:
    return sa.and_(
        Job.id == lease.job_id, Job.lease_owner == lease.owner, Job.lease_epoch == lease.epoch
    )


def renew_lease(s: Session | sa.Connection, lease: Lease, ttl_s: float) -> bool:
    """Extend ``lease`` to ``ttl_s`` seconds from now (the database's clock); False if it is no
    longer held (released, or taken over after it expired). One ``UPDATE`` (the job's row is
    not loaded); ``s`` may be a connection in autocommit (:meth:`db.Database.write_one`)."""
    _check_owner(lease.owner)
    now, until = _lease_until(s, ttl_s)
    renew = (
        sa.update(Job)
        .where(_held(lease))
        .values(lease_expires_at=until, heartbeat_at=now)
        .returning(Job.id)
    )
    if s.execute(renew).first() is not None:
        return True
    if s.scalar(sa.select(Job.id).where(Job.id == lease.job_id)) is None:
        raise NotFound(f"no job {lease.job_id}; list jobs with `tunefleet jobs`")
    return False


def check_lease(s: Session, lease: Lease) -> None:
    """Raise LeaseLost unless ``lease`` is still held: the fencing check that every write of a
    lease holder runs first, in the write's own transaction. It is an ``UPDATE`` of the job's
    row (which changes nothing), so the row stays locked until the transaction ends (SQLite: the
    session's write lock already is): no takeover commits between the check and the write."""
    fence = (
        sa.update(Job)
        .where(_held(lease))
        .values(lease_epoch=Job.lease_epoch)
        .returning(Job.id)
        .execution_options(synchronize_session=False)
    )
    if s.execute(fence).first() is None:
        raise LeaseLost(
            f"job {lease.job_id}'s lease is no longer {lease.owner}'s (epoch {lease.epoch}): "
            "another owner took the job over; this write was discarded"
        )


def release_lease(s: Session, lease: Lease) -> None:
    """Give up ``lease``; a no-op if it is no longer held."""
    job = _job_row(s, lease.job_id, for_update=True)
    if job.lease_owner != lease.owner or job.lease_epoch != lease.epoch:
        return
    job.lease_owner = job.lease_expires_at = job.heartbeat_at = None
    s.flush()


def lease_live(s: Session, job_id: int) -> bool:
    """Whether job ``job_id`` has an unexpired lease now (the database's clock); raises
    NotFound for an unknown job."""
    job = _job_row(s, job_id)
    return _lease_live(job, db_now(s))


def claim_next_job(s: Session, owner: str, ttl_s: float) -> int | None:
    """Lease the next job to run to ``owner`` and return its id, or None if there is none.

    The next job is a ``queued`` job without a live lease, or a ``running`` job whose lease
    expired (its owner died), expiry read on the database's clock: the highest priority first;
    among equal priorities, the job of the team that holds the fewest live leases now (fair
    share: a team that submitted many jobs does not hold back a team that submitted one), then
    the oldest. On PostgreSQL the candidate row is taken with ``SELECT ... FOR UPDATE SKIP
    LOCKED``, so concurrent schedulers each get another job; on SQLite the session's write lock
    (``BEGIN IMMEDIATE``) serializes them. The job's status is left as it is: running it is the
    caller's move (under a lease of its own: :func:`acquire_lease`).
    """
    _check_owner(owner)
    now, until = _lease_until(s, ttl_s)
    expired = sa.and_(Job.lease_expires_at.is_not(None), Job.lease_expires_at <= now)
    held = (
        sa.select(Job.team.label("team"), sa.func.count().label("n"))
        .where(Job.lease_owner.is_not(None), Job.lease_expires_at > now)
        .group_by(Job.team)
        .subquery("held")
    )
    query = (
        sa.select(Job)
        .outerjoin(held, held.c.team == Job.team)
        .where(
            sa.or_(
                sa.and_(Job.status == JobStatus.QUEUED, sa.or_(Job.lease_owner.is_(None), expired)),
                sa.and_(Job.status == JobStatus.RUNNING, expired),
            )
        )
        .order_by(Job.priority.desc(), sa.func.coalesce(held.c.n, 0), Job.created_at, Job.id)
        .limit(1)
        .with_for_update(skip_locked=True, of=Job)
    )
    job = s.scalar(query)
    if job is None:
        return None
    _take_lease(job, owner, now, until)
    s.flush()
    return job.id


def jobs_leased_by(s: Session, owner: str) -> list[int]:
    """Ids of the jobs whose lease ``owner`` holds (live or expired but not taken), oldest first."""
    return list(s.scalars(sa.select(Job.id).where(Job.lease_owner == owner).order_by(Job.id)))


def ensure_study(
    s: Session,
    job_id: int,
    kernel_id: int,
    problem_key: str,
    problem: Mapping[str, Any],
    device_class_id: int,
    sampler: str,
    optuna_study_name: str,
) -> int:
    """Id of the study of ``job_id`` for (problem_key, device class), created ``running`` if new."""
    key = {"job_id": job_id, "problem_key": problem_key, "device_class_id": device_class_id}
    return _get_or_create(
        s,
        Study,
        key,
        kernel_id=kernel_id,
        problem=dict(problem),
        sampler=sampler,
        optuna_study_name=optuna_study_name,
        status=StudyStatus.RUNNING,
    )


def set_study_status(s: Session, study_id: int, status: StudyStatus | str) -> None:
    """Set the status of study ``study_id``; raises NotFound for an unknown study."""
    target = _coerce(StudyStatus, status, "study status")
    study = s.get(Study, study_id)
    if study is None:
        raise NotFound(f"no study {study_id}")
    study.status = target
    s.flush()


def studies_for_job(s: Session, job_id: int) -> list[StudyRecord]:
    """Every study of job ``job_id`` with its device class, oldest first ([] for an unknown job)."""
    return studies_for_jobs(s, [job_id])


def studies_for_jobs(s: Session, job_ids: Collection[int]) -> list[StudyRecord]:
    """Every study of the jobs ``job_ids`` with its device class, oldest first, in one query."""
    if not job_ids:
        return []
    rows = s.execute(
        sa.select(Study, DeviceClass)
        .join(DeviceClass, Study.device_class_id == DeviceClass.id)
        .where(Study.job_id.in_(list(job_ids)))
        .order_by(Study.id)
    ).all()
    return [
        _record(StudyRecord, study, device_class=_record(DeviceClassRecord, cls))
        for study, cls in rows
    ]


def _coerce(enum_type: type[_E], value: object, what: str) -> _E:
    try:
        return enum_type(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in enum_type)
        raise InvalidRecord(f"unknown {what} {value!r}; one of {allowed}") from None


class _TrialKey(TypedDict):
    kernel_id: int
    problem_key: str
    device_class_id: int
    config: Mapping[str, Any]
    config_key: str
    outcome: TrialOutcome | str


class TrialFields(_TrialKey, total=False):
    """One trial row's fields: its key and verdict (required), then what was measured."""

    job_id: int | None
    study_id: int | None
    environment_id: int | None
    samples_ms: list[float] | None
    median_ms: float | None
    iqr_ms: float | None
    max_rel_error: float | None
    compile_s: float | None
    run_s: float | None
    error: str | None
    worker: str | None
    host: str | None
    reused: bool
    objective: Objective | str
    provisional: bool


def record_trial(s: Session, **fields: Unpack[TrialFields]) -> int:
    """Write one trial and return its id; ``outcome`` is an Outcome value (``"ok"``, ``"infra"``, ...),
    ``objective`` what its times mean (default ``kernel``).

    ``provisional=True`` marks a verdict that may not be the config's fault (an outcome of
    :data:`db.models.RETRYABLE_OUTCOMES`): kept for the record, never reused by
    :func:`find_measured` / :func:`measured_for_key`, so the config is measured again.
    ``config_key`` must be the caller's canonical JSON of ``config`` (search_spaces.space.config_key).
    The row is flushed, and committed when the caller's session block ends.
    """
    return record_trials(s, [fields])[0]


def record_trials(s: Session, rows: Sequence[TrialFields]) -> list[int]:
    """Write several trials (each: :func:`record_trial`'s fields) in one statement (one
    batched ``INSERT ... RETURNING``, no ORM objects); their ids, in order."""
    if not rows:
        return []
    values = [_trial_values(row) for row in rows]
    if s.get_bind().dialect.name == "postgresql":
        return _insert_json(s, values)
    table = cast(sa.Table, Trial.__table__)
    insert = sa.insert(table).returning(table.c.id, sort_by_parameter_order=True)
    return list(s.execute(insert, values).scalars())


#: The trial columns :func:`_insert_json` writes, with their PostgreSQL types.
_JSON_INSERT_COLUMNS = (
    ("job_id", "int8"),
    ("study_id", "int8"),
    ("kernel_id", "int8"),
    ("problem_key", "text"),
    ("device_class_id", "int8"),
    ("environment_id", "int8"),
    ("config", "json"),
    ("config_key", "text"),
    ("outcome", "text"),
    ("objective", "text"),
    ("samples_ms", "json"),
    ("median_ms", "float8"),
    ("iqr_ms", "float8"),
    ("max_rel_error", "float8"),
    ("compile_s", "float8"),
    ("run_s", "float8"),
    ("error", "text"),
    ("worker", "text"),
    ("host", "text"),
    ("reused", "bool"),
    ("provisional", "bool"),
    ("created_at", "timestamptz"),
)
_ENUM_COLUMNS = frozenset({"outcome", "objective"})
_FLOAT_COLUMNS = frozenset(c for c, t in _JSON_INSERT_COLUMNS if t == "float8")
_TRIAL_COLUMNS = cast(sa.Table, Trial.__table__).c
#: The columns whose types make text storable (db.text).
_STORED_COLUMNS: tuple[tuple[str, StoredString | StoredText | StoredJSON], ...] = tuple(
    (c, t)
    for c, _ in _JSON_INSERT_COLUMNS
    if isinstance(t := _TRIAL_COLUMNS[c].type, StoredString | StoredText | StoredJSON)
)
_NO_DIALECT = postgresql.dialect()
_JSON_SELECT = {"samples_ms": "coalesce(samples_ms, 'null'::json)"}
#: One statement text whatever the batch's size, with one parameter: the rows as one JSON
#: array of objects, which PostgreSQL takes apart (``json_to_recordset``); psycopg dumps one
#: string instead of an array per column (its per-element dumping and escaping of the text
#: arrays was a fifth of a fleet server's Python time). Rows in the array's order.
_JSON_INSERT = (
    f"INSERT INTO {Trial.__tablename__} ({', '.join(c for c, _ in _JSON_INSERT_COLUMNS)}) "
    # json_to_recordset reads a JSON null as SQL NULL: samples_ms stays JSON null, as
    # SQLAlchemy's JSON type writes None (and the other backends hold it).
    f"SELECT {', '.join(_JSON_SELECT.get(c, c) for c, _ in _JSON_INSERT_COLUMNS)} "
    "FROM ROWS FROM (json_to_recordset(%(rows)s::json) AS "
    f"({', '.join(f'{c} {t}' for c, t in _JSON_INSERT_COLUMNS)})) "
    f"WITH ORDINALITY AS u({', '.join(c for c, _ in _JSON_INSERT_COLUMNS)}, n) ORDER BY n "
    "RETURNING id"
)


def _json_row(values: dict[str, Any]) -> dict[str, Any]:
    """A trial row's values as JSON values (enums by value, the time in ISO 8601, text made
    storable by its column's type, as a bound parameter is: this statement bypasses them)."""
    row = dict(values)
    for column, stored in _STORED_COLUMNS:
        row[column] = stored.process_bind_param(row[column], _NO_DIALECT)
    for column in _ENUM_COLUMNS:
        row[column] = row[column].value
    row["created_at"] = row["created_at"].isoformat()
    return row


def _non_finite_as_text(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with a non-finite float column as PostgreSQL's text for it (JSON has none)."""
    out = dict(row)
    for column in _FLOAT_COLUMNS:
        value = out[column]
        if isinstance(value, float) and not math.isfinite(value):
            out[column] = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return out


def _insert_json(s: Session, values: list[dict[str, Any]]) -> list[int]:
    """PostgreSQL: ``values`` inserted by one constant-text ``INSERT ... SELECT FROM
    json_to_recordset`` (the batched ``INSERT ... VALUES`` had a new text per batch size,
    parsed again by psycopg and planned again by the server each time); their ids in order.
    The ids are drawn from the sequence row by row in the array's order (``ORDER BY n``), so
    ascending ids are the rows' order."""
    rows = [_json_row(v) for v in values]
    try:
        document = json.dumps(rows, allow_nan=False)
    except ValueError:  # a non-finite float column: as text (samples are checked finite)
        document = json.dumps([_non_finite_as_text(r) for r in rows])
    ids = s.connection().exec_driver_sql(_JSON_INSERT, {"rows": document}).scalars().all()
    return sorted(ids)


def _trial_values(f: TrialFields) -> dict[str, Any]:
    """A checked trial row's column values (see :func:`record_trial`)."""
    verdict = _coerce(TrialOutcome, f["outcome"], "trial outcome")
    provisional = f.get("provisional", False)
    if provisional and verdict not in RETRYABLE_OUTCOMES:
        allowed = ", ".join(sorted(o.value for o in RETRYABLE_OUTCOMES))
        raise InvalidRecord(
            f"only a retryable outcome ({allowed}) can be provisional, not {verdict.value}"
        )
    samples = f.get("samples_ms")
    if samples is not None and not all(math.isfinite(x) for x in samples):
        raise InvalidRecord(f"trial samples must be finite numbers of ms, got {list(samples)!r}")
    return {
        "job_id": f.get("job_id"),
        "study_id": f.get("study_id"),
        "kernel_id": f["kernel_id"],
        "problem_key": f["problem_key"],
        "device_class_id": f["device_class_id"],
        "environment_id": f.get("environment_id"),
        "config": dict(f["config"]),
        "config_key": f["config_key"],
        "outcome": verdict,
        "objective": _coerce(Objective, f.get("objective", Objective.KERNEL), "objective"),
        "samples_ms": list(samples) if samples is not None else None,
        "median_ms": f.get("median_ms"),
        "iqr_ms": f.get("iqr_ms"),
        "max_rel_error": f.get("max_rel_error"),
        "compile_s": f.get("compile_s"),
        "run_s": f.get("run_s"),
        "error": f.get("error"),
        "worker": f.get("worker"),
        "host": f.get("host"),
        "reused": f.get("reused", False),
        "provisional": provisional,
        "created_at": utcnow(),
    }


#: A trial row that is a config's own verdict, reusable by later jobs.
_VERDICT = (Trial.outcome != TrialOutcome.INFRA, Trial.provisional.is_(False))


def find_measured(
    s: Session,
    kernel_id: int,
    problem_key: str,
    device_class_id: int,
    config_key: str,
    objective: Objective = Objective.KERNEL,
) -> TrialRecord | None:
    """The newest trial of this config on this key and objective that is the config's own
    verdict (neither ``infra`` nor provisional), or None.

    Such a verdict (ok, wrong, compile_error, a confirmed timeout, ...) need not be repeated.
    """
    trial = s.scalar(
        sa.select(Trial)
        .where(
            Trial.kernel_id == kernel_id,
            Trial.problem_key == problem_key,
            Trial.device_class_id == device_class_id,
            Trial.config_key == config_key,
            Trial.objective == objective,
            *_VERDICT,
        )
        .order_by(Trial.id.desc())
        .limit(1)
    )
    return _record(TrialRecord, trial) if trial is not None else None


@dataclass(frozen=True)
class ReusedVerdict:
    """A ``reused`` trial row written by :func:`reuse_measured`: its id, and the verdict it
    copied."""

    id: int
    outcome: TrialOutcome
    median_ms: float | None


def reuse_measured(
    s: Session | sa.Connection,
    kernel_id: int,
    problem_key: str,
    device_class_id: int,
    config_key: str,
    objective: Objective,
    *,
    job_id: int,
    study_id: int,
    config: Mapping[str, Any],
) -> ReusedVerdict | None:
    """Copy the verdict :func:`find_measured` finds for this config into a new ``reused`` row
    of ``job_id``'s study ``study_id`` (its measurement, environment, worker and host; ``config``
    as the study names it), in one ``INSERT ... SELECT``; the new row, or None (nothing
    written) if the config has no verdict on this key. ``s`` may be a connection (one in
    autocommit: :meth:`db.Database.write_one`)."""
    params = {
        "kernel_id": kernel_id,
        "problem_key": problem_key,
        "device_class_id": device_class_id,
        "config_key": config_key,
        "objective": objective,
        "job_id": job_id,
        "study_id": study_id,
        "config": dict(config),
        "created_at": utcnow(),
    }
    conn = s.connection() if isinstance(s, Session) else s  # Core either way: no ORM layers
    row = conn.execute(_reuse_statement(), params).first()
    return None if row is None else ReusedVerdict(row.id, TrialOutcome(row.outcome), row.median_ms)


#: The trial columns a reused row copies from the verdict it reuses.
_REUSE_COPIED = ("kernel_id", "problem_key", "device_class_id", "environment_id", "config_key",
                 "outcome", "objective", "samples_ms", "median_ms", "iqr_ms", "max_rel_error",
                 "error", "worker", "host")  # fmt: skip


@functools.cache
def _reuse_statement() -> sa.Insert:
    """:func:`reuse_measured`'s statement, built once: a new statement per call spent more of a
    server's time in SQLAlchemy's construction and cache key than in the database."""
    table = cast(sa.Table, Trial.__table__)
    c = table.c
    given = {
        "job_id": sa.bindparam("job_id", type_=c.job_id.type),
        "study_id": sa.bindparam("study_id", type_=c.study_id.type),
        "config": sa.bindparam("config", type_=c.config.type),
        "reused": sa.true(),
        "provisional": sa.false(),
        "created_at": sa.bindparam("created_at", type_=c.created_at.type),
    }
    prior = (
        sa.select(*(c[name] for name in _REUSE_COPIED), *given.values())
        .where(
            c.kernel_id == sa.bindparam("kernel_id"),
            c.problem_key == sa.bindparam("problem_key"),
            c.device_class_id == sa.bindparam("device_class_id"),
            c.config_key == sa.bindparam("config_key"),
            c.objective == sa.bindparam("objective", type_=c.objective.type),
            *_VERDICT,
        )
        .order_by(c.id.desc())
        .limit(1)
    )
    return (
        sa.insert(table)
        .from_select([*_REUSE_COPIED, *given], prior)
        .returning(c.id, c.outcome, c.median_ms)
    )


def measured_keys(
    s: Session,
    kernel_id: int,
    problem_key: str,
    device_class_id: int,
    objective: Objective = Objective.KERNEL,
    after_id: int = 0,
) -> tuple[set[str], int]:
    """The config keys with a verdict (see :func:`find_measured`) on this key and objective in a
    trial row newer than ``after_id``, and the newest such row's id (``after_id`` if none): what
    a study checks before it looks one config up. Read from ``ix_tf_trials_measured`` alone."""
    rows = s.execute(
        sa.select(Trial.config_key, sa.func.max(Trial.id))
        .where(
            Trial.kernel_id == kernel_id,
            Trial.problem_key == problem_key,
            Trial.device_class_id == device_class_id,
            Trial.objective == objective,
            Trial.id > after_id,
            *_VERDICT,
        )
        .group_by(Trial.config_key)
    ).all()
    return {key for key, _ in rows}, max((last for _, last in rows), default=after_id)


#: A study's key in the trials: (kernel id, problem key, device class id, objective).
StudyKey = tuple[int, str, int, Objective]


def verdicts_after(s: Session, after_id: int) -> tuple[dict[StudyKey, set[str]], int]:
    """The config keys with a verdict (see :func:`find_measured`) in trial rows newer than
    ``after_id``, by study key, and the newest such row's id (``after_id`` if none). Reads only
    the new rows (a range of the primary key)."""
    keys = (Trial.kernel_id, Trial.problem_key, Trial.device_class_id, Trial.objective)
    # The upper bound holds for every row; it makes the range two-sided, which PostgreSQL takes
    # for a narrow one even without the table's statistics (never analyzed: autovacuum off or
    # not yet run). One-sided, it took a third of the table and scanned all of it every time.
    newest = sa.select(sa.func.max(Trial.id)).correlate(None).scalar_subquery()
    rows = s.execute(
        sa.select(*keys, Trial.config_key, sa.func.max(Trial.id))
        .where(Trial.id > after_id, Trial.id <= newest, *_VERDICT)
        .group_by(*keys, Trial.config_key)
    ).all()
    out: dict[StudyKey, set[str]] = {}
    for kernel_id, pkey, class_id, objective, ckey, _ in rows:
        out.setdefault((kernel_id, pkey, class_id, objective), set()).add(ckey)
    return out, max((row[5] for row in rows), default=after_id)


def last_trial_id(s: Session) -> int:
    """The newest trial row's id (0 if there is none)."""
    return int(s.scalar(sa.select(sa.func.max(Trial.id))) or 0)


def measured_for_key(
    s: Session,
    kernel_id: int,
    problem_key: str,
    device_class_id: int,
    objective: Objective = Objective.KERNEL,
) -> list[MeasuredRecord]:
    """Each config's oldest trial on this key and objective, by any job, that is the config's own
    verdict (neither ``infra`` nor provisional); oldest first.

    One row per config however often it was measured again (a popular key holds tens of thousands
    of trials of a space of a few thousand configs), and only the columns warm start needs: the
    configs are picked on ``ix_tf_trials_measured`` alone (on PostgreSQL it carries every column
    the choice reads), then only the chosen rows are read.
    """
    first = (
        sa.select(sa.func.min(Trial.id))
        .where(
            Trial.kernel_id == kernel_id,
            Trial.problem_key == problem_key,
            Trial.device_class_id == device_class_id,
            Trial.objective == objective,
            *_VERDICT,
        )
        .group_by(Trial.config_key)
    )
    rows = s.execute(
        sa.select(Trial.config, Trial.config_key, Trial.median_ms, Trial.outcome)
        .where(Trial.id.in_(first.scalar_subquery()))
        .order_by(Trial.id)
    ).all()
    return [
        MeasuredRecord(config=config, config_key=key, median_ms=median, outcome=outcome)
        for config, key, median, outcome in rows
    ]


def trials_for_study(s: Session, study_id: int) -> list[TrialRecord]:
    """Every trial of study ``study_id``, oldest first."""
    trials = s.scalars(sa.select(Trial).where(Trial.study_id == study_id).order_by(Trial.id))
    return [_record(TrialRecord, t) for t in trials]


def outcome_counts(s: Session, study_id: int) -> dict[str, int]:
    """Number of trials of study ``study_id`` per outcome value; outcomes with none are absent."""
    rows = s.execute(
        sa.select(Trial.outcome, sa.func.count())
        .where(Trial.study_id == study_id)
        .group_by(Trial.outcome)
    ).all()
    return {outcome.value: count for outcome, count in rows}


_BEST = cast(sa.Table, BestConfig.__table__)


@dataclass(frozen=True)
class BestDecision:
    """How a final paired re-timing decided a best-config key (see :class:`BestRecord`):
    ``backend`` and ``vendor`` the winner, ``triton_ms`` the stored config's time,
    ``vendor_ms``/``default_ms`` the vendor path's and the spec default's, ``noise`` the
    relative noise floor; ``over``: the ``updated_at`` of the stored row it was timed against
    (None: none, or not timed)."""

    backend: BestBackend = BestBackend.TRITON
    vendor: str | None = None
    triton_ms: float | None = None
    vendor_ms: float | None = None
    default_ms: float | None = None
    noise: float | None = None
    over: datetime | None = None

    def columns(self) -> dict[str, Any]:
        backend = _coerce(BestBackend, self.backend, "backend")
        if backend is BestBackend.VENDOR and not self.vendor:
            raise InvalidRecord("a vendor win must name its vendor path")
        return {
            "backend": backend.value,
            "vendor": self.vendor,
            "triton_ms": self.triton_ms,
            "vendor_ms": self.vendor_ms,
            "default_ms": self.default_ms,
            "noise": self.noise,
        }


def upsert_best(
    s: Session,
    kernel_name: str,
    kernel_version: str,
    problem_key: str,
    device_class_key: str,
    triton_minor: str,
    config: Mapping[str, Any],
    time_ms: float,
    trial_id: int | None,
    job_id: int | None,
    environment_id: int | None,
    objective: Objective = Objective.KERNEL,
    *,
    decision: BestDecision | None = None,
) -> bool:
    """Store ``config`` as the best for its key (``objective`` included) if the key is new or
    ``time_ms`` is strictly faster: than the stored time, or, for a row that revalidation marked
    regressed or failed, than its re-timed time (none when it failed), which is what the stored
    config takes now; or, with a ``decision`` whose ``over`` is the stored row's ``updated_at``
    (the caller timed the stored best side by side and decided against it, and nobody wrote the
    row since), whatever its time. A written row is no longer marked; it takes the
    ``decision``'s backend and times (without one: ``triton``, none).

    One atomic INSERT ... ON CONFLICT DO UPDATE ... WHERE, so concurrent writers can never
    replace a faster time with a slower one they did not time. Returns True if the row was
    written. Raises InvalidRecord unless ``time_ms`` is a finite positive number.
    """
    if not (isinstance(time_ms, int | float) and math.isfinite(time_ms) and time_ms > 0):
        raise InvalidRecord(f"best time must be a finite positive number of ms, got {time_ms!r}")
    decision = decision or BestDecision()
    values = {
        "kernel_name": kernel_name,
        "kernel_version": kernel_version,
        "problem_key": problem_key,
        "device_class_key": device_class_key,
        "triton_minor": triton_minor,
        "objective": Objective(objective).value,
        "config": dict(config),
        "time_ms": float(time_ms),
        "trial_id": trial_id,
        "job_id": job_id,
        "environment_id": environment_id,
        "updated_at": utcnow(),
        **_UNMARKED,
        **decision.columns(),
    }
    dialect = s.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    new = insert(_BEST).values(values)
    updated = {name: new.excluded[name] for name in values if name not in BEST_KEY}
    stale = _BEST.c.revalidation.in_([m.value for m in STALE_STATES])
    retimed_slower = sa.or_(
        _BEST.c.revalidated_ms.is_(None), _BEST.c.revalidated_ms > new.excluded.time_ms
    )
    decided = sa.false() if decision.over is None else _BEST.c.updated_at == decision.over
    upsert = new.on_conflict_do_update(
        index_elements=list(BEST_KEY),
        set_=updated,
        where=sa.or_(
            _BEST.c.time_ms > new.excluded.time_ms, sa.and_(stale, retimed_slower), decided
        ),
    ).returning(_BEST.c.id)
    return s.execute(upsert).first() is not None


_UNMARKED: dict[str, Any] = {
    "revalidation": None,
    "revalidated_at": None,
    "revalidated_ms": None,
    "revalidated_environment_id": None,
}


class VendorTrialFields(TypedDict, total=False):
    """One vendor trial row's fields (see :class:`VendorTrialRecord`); the key, ``vendor`` and
    ``outcome`` are required."""

    job_id: int | None
    study_id: int | None
    kernel_name: str
    problem_key: str
    device_class_id: int
    environment_id: int | None
    objective: Objective | str
    vendor: str
    outcome: TrialOutcome | str
    samples_ms: list[float] | None
    median_ms: float | None
    iqr_ms: float | None
    max_rel_error: float | None
    error: str | None
    worker: str | None
    host: str | None


_VENDOR_REQUIRED = ("kernel_name", "problem_key", "device_class_id", "vendor", "outcome")


def record_vendor_trials(s: Session, rows: Sequence[VendorTrialFields]) -> list[int]:
    """Write measurements of vendor paths (each: :class:`VendorTrialFields`); their ids, in
    order. Raises InvalidRecord for a missing key field, an unknown outcome or objective, or a
    non-finite sample."""
    added = []
    for f in rows:
        missing = [name for name in _VENDOR_REQUIRED if not f.get(name)]
        if missing:
            raise InvalidRecord(f"a vendor trial needs {', '.join(missing)}")
        samples = f.get("samples_ms")
        if samples is not None and not all(math.isfinite(x) for x in samples):
            raise InvalidRecord(f"vendor samples must be finite numbers of ms, got {samples!r}")
        values: dict[str, Any] = {
            **f,
            "outcome": _coerce(TrialOutcome, f["outcome"], "trial outcome"),
            "objective": _coerce(Objective, f.get("objective", Objective.KERNEL), "objective"),
            "samples_ms": list(samples) if samples is not None else None,
        }
        row = VendorTrial(**values)
        s.add(row)
        added.append(row)
    s.flush()
    return [row.id for row in added]


def measured_vendor(
    s: Session,
    kernel_name: str,
    problem_key: str,
    device_class_id: int,
    environment_id: int | None,
    objective: Objective = Objective.KERNEL,
) -> dict[str, VendorTrialRecord]:
    """Per vendor path, its newest ``ok`` measurement on this key, in this environment, under
    ``objective``: what a study answers from the database instead of measuring again, and what
    promotion re-times."""
    rows = s.scalars(
        sa.select(VendorTrial)
        .where(
            VendorTrial.kernel_name == kernel_name,
            VendorTrial.problem_key == problem_key,
            VendorTrial.device_class_id == device_class_id,
            VendorTrial.objective == objective,
            VendorTrial.outcome == TrialOutcome.OK,
            VendorTrial.median_ms.is_not(None),
            VendorTrial.environment_id.is_(None)
            if environment_id is None
            else VendorTrial.environment_id == environment_id,
        )
        .order_by(VendorTrial.id)
    )
    return {row.vendor: _record(VendorTrialRecord, row) for row in rows}


def vendor_trials_for_study(s: Session, study_id: int) -> list[VendorTrialRecord]:
    """Every vendor measurement study ``study_id`` made, oldest first."""
    rows = s.scalars(
        sa.select(VendorTrial).where(VendorTrial.study_id == study_id).order_by(VendorTrial.id)
    )
    return [_record(VendorTrialRecord, row) for row in rows]


def mark_revalidation(
    s: Session,
    best_id: int,
    state: RevalidationState,
    time_ms: float | None,
    environment_id: int | None,
    at: datetime | None = None,
) -> None:
    """Record what re-timing best config ``best_id`` found: ``state``, the re-timed median
    ``time_ms`` (None when it failed), the environment it ran in, and when (default now). The
    stored config and time stay; ``updated_at`` moves (caches keyed on it, such as the server's,
    see the change); ``upsert_best`` clears the mark. Raises NotFound for no such
    row, InvalidRecord for a time that is not a finite positive number."""
    if time_ms is not None and not (math.isfinite(time_ms) and time_ms > 0):
        raise InvalidRecord(f"re-timed ms must be a finite positive number, got {time_ms!r}")
    done = s.execute(
        sa.update(_BEST)
        .where(_BEST.c.id == best_id)
        .values(
            revalidation=RevalidationState(state).value,
            revalidated_at=at or utcnow(),
            revalidated_ms=time_ms,
            revalidated_environment_id=environment_id,
        )
        .returning(_BEST.c.id)
    ).first()
    if done is None:
        raise NotFound(f"no best config with id {best_id}")


def get_best(
    s: Session,
    kernel_name: str,
    problem_key: str | None = None,
    device_class_key: str | None = None,
    kernel_version: str | None = None,
    triton_minor: str | None = None,
    objective: Objective | None = Objective.KERNEL,
) -> list[BestRecord]:
    """Best-config rows of ``kernel_name`` matching every filter given (None: any), in key order;
    by default those of the kernel objective. Each carries the job that produced it (its own
    ``job_id``, else its trial's) and that job's team."""
    producer = sa.func.coalesce(BestConfig.job_id, Trial.job_id)
    query = (
        sa.select(BestConfig, producer, Job.team)
        .outerjoin(Trial, BestConfig.trial_id == Trial.id)
        .outerjoin(Job, Job.id == producer)
        .where(BestConfig.kernel_name == kernel_name)
    )
    filters = (
        (BestConfig.problem_key, problem_key),
        (BestConfig.device_class_key, device_class_key),
        (BestConfig.kernel_version, kernel_version),
        (BestConfig.triton_minor, triton_minor),
        (BestConfig.objective, objective),
    )
    for column, value in filters:
        if value is not None:
            query = query.where(column == value)
    query = query.order_by(
        BestConfig.kernel_version,
        BestConfig.device_class_key,
        BestConfig.triton_minor,
        BestConfig.problem_key,
        BestConfig.objective,
    )
    return [
        _record(BestRecord, best, job_id=job_id, team=team)
        for best, job_id, team in s.execute(query).all()
    ]


def get_best_by_id(s: Session, best_id: int) -> BestRecord:
    """The best-config row ``best_id`` with its producer (as :func:`get_best`); NotFound if none."""
    producer = sa.func.coalesce(BestConfig.job_id, Trial.job_id)
    row = s.execute(
        sa.select(BestConfig, producer, Job.team)
        .outerjoin(Trial, BestConfig.trial_id == Trial.id)
        .outerjoin(Job, Job.id == producer)
        .where(BestConfig.id == best_id)
    ).first()
    if row is None:
        raise NotFound(f"no best config with id {best_id}")
    best, job_id, team = row
    return _record(BestRecord, best, job_id=job_id, team=team)


def find_best(
    s: Session,
    kernel_name: str,
    kernel_version: str,
    problem_key: str,
    device_class_key: str,
    objective: Objective,
    triton_minor: str | None = None,
) -> BestRecord | None:
    """The best row of this key (the newest-updated one of any Triton minor when ``triton_minor``
    is None), or None."""
    found = get_best(
        s, kernel_name, problem_key, device_class_key, kernel_version, triton_minor, objective
    )
    return max(found, key=lambda b: b.updated_at) if found else None


def bests_to_revalidate(
    s: Session,
    device_class_key: str,
    environment_id: int,
    *,
    changed: bool = True,
    checked_before: datetime | None = None,
) -> list[BestRecord]:
    """Stored bests of ``device_class_key`` (any kernel, version, objective) that need timing in
    environment ``environment_id``: with ``changed``, those measured in another environment and
    not revalidated in this one yet; with ``checked_before``, also those whose last check (their
    revalidation, else their last update) is older. A row with no environment is never compared
    (nothing says what it was measured under). Each with its producer, as :func:`get_best`."""
    due = []
    if changed:
        due.append(
            sa.and_(
                BestConfig.environment_id.is_not(None),
                BestConfig.environment_id != environment_id,
                sa.or_(
                    BestConfig.revalidated_environment_id.is_(None),
                    BestConfig.revalidated_environment_id != environment_id,
                ),
            )
        )
    if checked_before is not None:
        due.append(
            sa.func.coalesce(BestConfig.revalidated_at, BestConfig.updated_at) < checked_before
        )
    if not due:
        return []
    producer = sa.func.coalesce(BestConfig.job_id, Trial.job_id)
    query = (
        sa.select(BestConfig, producer, Job.team)
        .outerjoin(Trial, BestConfig.trial_id == Trial.id)
        .outerjoin(Job, Job.id == producer)
        .where(BestConfig.device_class_key == device_class_key, sa.or_(*due))
        .order_by(BestConfig.id)
    )
    return [
        _record(BestRecord, best, job_id=job_id, team=team)
        for best, job_id, team in s.execute(query).all()
    ]


#: The PostgreSQL advisory lock key under which schedulers queue revalidation jobs.
_REVALIDATION_LOCK = 0x7466_7265_7661


def lock_revalidation_queue(s: Session) -> None:
    """Hold, until the transaction ends, the lock under which revalidation jobs are queued, so
    that two schedulers that see one new stack at once do not both queue its rows (PostgreSQL:
    an advisory transaction lock; SQLite: a write session is serialized already)."""
    if s.get_bind().dialect.name == "postgresql":
        s.execute(sa.select(sa.func.pg_advisory_xact_lock(_REVALIDATION_LOCK)))


def open_jobs_of_kind(s: Session, kind: JobKind) -> list[JobRecord]:
    """The queued and running jobs of ``kind``, oldest first."""
    query = _job_query().where(
        Job.kind == _coerce(JobKind, kind, "job kind"),
        Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]),
    )
    return [_job_record(*row) for row in s.execute(query.order_by(Job.id)).all()]


def count_jobs_since(s: Session, kind: JobKind, team: str | None, since: datetime) -> int:
    """Jobs of ``kind`` and ``team`` (None: the jobs of no team) created at or after ``since``."""
    owner = Job.team.is_(None) if team is None else Job.team == team
    query = sa.select(sa.func.count(Job.id)).where(
        Job.kind == _coerce(JobKind, kind, "job kind"), owner, Job.created_at >= since
    )
    return s.scalar(query) or 0


@dataclass(frozen=True)
class RetimingRecord:
    """One re-timing of a stored best (see :class:`db.models.Retiming`), with its environment's
    versions (None when it has no environment)."""

    id: int
    best_id: int
    job_id: int | None
    environment_id: int | None
    at: datetime
    state: RevalidationState
    stored_ms: float
    time_ms: float | None
    vendor_ms: float | None
    noise: float | None
    changed: str | None
    triton: str | None = None
    torch: str | None = None
    driver: str | None = None
    runtime: str | None = None


def _finite_or_none(value: float | None, what: str) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise InvalidRecord(f"{what} must be a finite positive number of ms, got {value!r}")
    return value


def record_retiming(
    s: Session,
    best_id: int,
    state: RevalidationState,
    stored_ms: float,
    time_ms: float | None,
    *,
    job_id: int | None = None,
    environment_id: int | None = None,
    vendor_ms: float | None = None,
    noise: float | None = None,
    changed: str | None = None,
    at: datetime | None = None,
) -> int:
    """Append one re-timing to best ``best_id``'s drift history; its id. Raises InvalidRecord
    for a time that is not a finite positive number."""
    row = Retiming(
        best_id=best_id,
        job_id=job_id,
        environment_id=environment_id,
        at=at or utcnow(),
        state=RevalidationState(state),
        stored_ms=_finite_or_none(stored_ms, "stored ms"),
        time_ms=_finite_or_none(time_ms, "re-timed ms"),
        vendor_ms=_finite_or_none(vendor_ms, "vendor ms"),
        noise=noise,
        changed=changed,
    )
    s.add(row)
    s.flush()
    return row.id


def retimed_by_job(s: Session, job_id: int) -> dict[int, RevalidationState]:
    """Best row id -> the verdict job ``job_id`` recorded for it (its last, if several)."""
    rows = s.execute(
        sa.select(Retiming.best_id, Retiming.state)
        .where(Retiming.job_id == job_id)
        .order_by(Retiming.id)
    ).all()
    return {best_id: RevalidationState(state) for best_id, state in rows}


def retimings(s: Session, best_id: int, limit: int = 1000) -> list[RetimingRecord]:
    """Best ``best_id``'s newest ``limit`` re-timings, oldest first, with their environments."""
    newest = (
        sa.select(Retiming, Environment)
        .outerjoin(Environment, Environment.id == Retiming.environment_id)
        .where(Retiming.best_id == best_id)
        .order_by(Retiming.id.desc())
        .limit(limit)
    )
    out = []
    for row, env in reversed(s.execute(newest).all()):
        versions = (
            dict.fromkeys(("triton", "torch", "driver", "runtime"))
            if env is None
            else {
                "triton": env.triton_version,
                "torch": env.torch_version,
                "driver": env.driver,
                "runtime": env.runtime,
            }
        )
        out.append(_record(RetimingRecord, row, **versions))
    return out


def mark_stack(s: Session, device_class_id: int, environment_id: int) -> bool:
    """Note that a live worker of the class reported this environment now; True if it is new
    for the class (first seen)."""
    now = utcnow()
    done = s.execute(
        sa.update(StackMark)
        .where(
            StackMark.device_class_id == device_class_id,
            StackMark.environment_id == environment_id,
        )
        .values(last_seen_at=now)
        .returning(StackMark.id)
    ).first()
    if done is not None:
        return False
    try:
        with s.begin_nested():
            s.add(
                StackMark(
                    device_class_id=device_class_id,
                    environment_id=environment_id,
                    first_seen_at=now,
                    last_seen_at=now,
                )
            )
    except IntegrityError:  # another scheduler marked it between our update and insert
        return False
    return True


@dataclass(frozen=True)
class ClassDrift:
    """What ``/metrics`` exports of one device class's stored bests: rows by revalidation state
    (``unchecked``: never revalidated, or tuned since), ``stale`` (measured in another stack
    than the class's newest mark and not revalidated in it) and re-timings by verdict."""

    device_class: str
    states: dict[str, int]
    stale: int
    retimings: dict[str, int]


def drift_by_class(s: Session) -> list[ClassDrift]:
    """Per device class with stored bests: :class:`ClassDrift`, in class order (three grouped
    queries, whatever the number of rows)."""
    states: dict[str, dict[str, int]] = {}
    for key, state, n in s.execute(
        sa.select(BestConfig.device_class_key, BestConfig.revalidation, sa.func.count()).group_by(
            BestConfig.device_class_key, BestConfig.revalidation
        )
    ).all():
        name = "unchecked" if state is None else RevalidationState(state).value
        states.setdefault(key, {})[name] = n
    newest = (
        sa.select(
            StackMark.device_class_id,
            sa.func.max(StackMark.first_seen_at).label("seen"),
        )
        .group_by(StackMark.device_class_id)
        .subquery("newest")
    )
    current = (
        sa.select(DeviceClass.key.label("key"), StackMark.environment_id.label("env"))
        .join(StackMark, StackMark.device_class_id == DeviceClass.id)
        .join(
            newest,
            sa.and_(
                newest.c.device_class_id == StackMark.device_class_id,
                newest.c.seen == StackMark.first_seen_at,
            ),
        )
        .subquery("current")
    )
    stale = dict(
        s.execute(
            sa.select(BestConfig.device_class_key, sa.func.count())
            .join(current, current.c.key == BestConfig.device_class_key)
            .where(
                BestConfig.environment_id.is_not(None),
                BestConfig.environment_id != current.c.env,
                sa.or_(
                    BestConfig.revalidated_environment_id.is_(None),
                    BestConfig.revalidated_environment_id != current.c.env,
                ),
            )
            .group_by(BestConfig.device_class_key)
        ).all()
    )
    timed: dict[str, dict[str, int]] = {}
    for key, state, n in s.execute(
        sa.select(BestConfig.device_class_key, Retiming.state, sa.func.count())
        .join(BestConfig, BestConfig.id == Retiming.best_id)
        .group_by(BestConfig.device_class_key, Retiming.state)
    ).all():
        timed.setdefault(key, {})[RevalidationState(state).value] = n
    return [
        ClassDrift(key, states.get(key, {}), int(stale.get(key, 0)), timed.get(key, {}))
        for key in sorted(set(states) | set(timed))
    ]


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    s: Session,
    team: str,
    scope: TokenScope | str,
    *,
    expires_at: datetime | None = None,
    name: str | None = None,
) -> tuple[TokenRecord, str]:
    """A new token of ``team`` with ``scope``: its record and the token itself.

    The token (``secrets.token_urlsafe(32)``) is returned only here; the database keeps its
    SHA-256. Raises InvalidRecord for an empty team or an unknown scope.
    """
    if not isinstance(team, str) or not team.strip() or len(team) > 200:
        raise InvalidRecord(f"token team must be a non-empty name of <= 200 chars, got {team!r}")
    if name is not None and len(name) > 200:
        raise InvalidRecord("token name must be <= 200 chars")
    token = secrets.token_urlsafe(32)
    row = Token(
        team=team,
        scope=_coerce(TokenScope, scope, "token scope"),
        token_hash=_token_hash(token),
        name=name,
        expires_at=expires_at,
    )
    s.add(row)
    s.flush()
    return _record(TokenRecord, row), token


#: verify_token writes last_used_at at most this often per token.
LAST_USED_EVERY = timedelta(minutes=1)


def verify_token(s: Session, token: str) -> TokenRecord | None:
    """The record of ``token`` if it is known, not revoked and not expired; else None.

    Stamps ``last_used_at`` when it is unset or older than :data:`LAST_USED_EVERY` (in a write
    session; a read-only one drops the stamp).
    """
    if not isinstance(token, str) or not token:
        return None
    row = s.scalar(sa.select(Token).where(Token.token_hash == _token_hash(token)))
    now = utcnow()
    if row is None or row.revoked_at is not None:
        return None
    if row.expires_at is not None and row.expires_at <= now:
        return None
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_EVERY:
        row.last_used_at = now
        s.flush()
    return _record(TokenRecord, row)


def list_tokens(s: Session) -> list[TokenRecord]:
    """Every token, revoked and expired ones included, oldest first."""
    return [_record(TokenRecord, t) for t in s.scalars(sa.select(Token).order_by(Token.id))]


def revoke_token(s: Session, token_id: int) -> bool:
    """Revoke token ``token_id``; False if there is no such token or it was already revoked."""
    row = s.get(Token, token_id, with_for_update=True)
    if row is None or row.revoked_at is not None:
        return False
    row.revoked_at = utcnow()
    s.flush()
    return True


def active_token_count(s: Session) -> int:
    """How many tokens are neither revoked nor expired."""
    query = sa.select(sa.func.count(Token.id)).where(
        Token.revoked_at.is_(None),
        sa.or_(Token.expires_at.is_(None), Token.expires_at > utcnow()),
    )
    return s.scalar(query) or 0


def write_audit(
    s: Session,
    *,
    action: str,
    token_id: int | None = None,
    team: str | None = None,
    target: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> None:
    """Append one entry to the audit log (``action`` e.g. ``job.submit``, ``token.revoke``)."""
    if not isinstance(action, str) or not action or len(action) > 64:
        raise InvalidRecord(f"audit action must be a non-empty name of <= 64 chars: {action!r}")
    if target is not None and len(target) > 200:
        raise InvalidRecord("audit target must be <= 200 chars")
    entry = AuditEntry(
        action=action,
        token_id=token_id,
        team=team,
        target=target,
        detail=dict(detail) if detail is not None else None,
    )
    s.add(entry)
    s.flush()


def list_audit(s: Session, limit: int = 100) -> list[AuditRecord]:
    """The ``limit`` newest audit entries, newest first."""
    rows = s.scalars(sa.select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit))
    return [_record(AuditRecord, e) for e in rows]

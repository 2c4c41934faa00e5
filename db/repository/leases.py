"""Job leases: who runs a job, fenced by an epoch, on the database's clock; the scheduler's claim."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.errors import InvalidRecord, LeaseLost, NotFound
from db.models import Job, JobStatus
from db.repository.jobs import job_row


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
    job = job_row(s, job_id, for_update=True)
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
    job = job_row(s, lease.job_id, for_update=True)
    if job.lease_owner != lease.owner or job.lease_epoch != lease.epoch:
        return
    job.lease_owner = job.lease_expires_at = job.heartbeat_at = None
    s.flush()


def lease_live(s: Session, job_id: int) -> bool:
    """Whether job ``job_id`` has an unexpired lease now (the database's clock); raises
    NotFound for an unknown job."""
    job = job_row(s, job_id)
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

"""Best configs: the conditional upsert, revalidation marks and reads, the revalidation queue's
reads and lock, and the stacks workers reported."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.errors import InvalidRecord, NotFound
from db.models import (
    BEST_KEY,
    BestConfig,
    DeviceClass,
    Job,
    Objective,
    StackMark,
    Trial,
    utcnow,
)
from db.repository._rows import coerce, record
from db.states import STALE_STATES, BestBackend, RevalidationState


@dataclass(frozen=True)
class BestRecord:
    """A best-config row: the fastest known ``config`` for its key, ``time_ms`` its median;
    ``device_class_id`` its device class (as a trial's), ``device_class_key`` that class's key;
    ``job_id`` and ``team`` say who produced it (None when unknown); ``revalidation`` and the
    ``revalidated_*`` fields the last ``tunefleet revalidate`` of it (None: never, or tuned since)."""

    id: int
    kernel_name: str
    kernel_version: str
    problem_key: str
    device_class_id: int
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
        backend = coerce(BestBackend, self.backend, "backend")
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
    device_class_id: int,
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
        "device_class_id": device_class_id,
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
    """Best-config rows of ``kernel_name`` matching every filter given (None: any;
    ``device_class_key`` the class's key, an exact match), in key order (the class by its key);
    by default those of the kernel objective. Each carries the job that produced it (its own
    ``job_id``, else its trial's) and that job's team."""
    query = _best_query().where(BestConfig.kernel_name == kernel_name)
    filters = (
        (BestConfig.problem_key, problem_key),
        (DeviceClass.key, device_class_key),
        (BestConfig.kernel_version, kernel_version),
        (BestConfig.triton_minor, triton_minor),
        (BestConfig.objective, objective),
    )
    for column, value in filters:
        if value is not None:
            query = query.where(column == value)
    query = query.order_by(
        BestConfig.kernel_version,
        DeviceClass.key,
        BestConfig.triton_minor,
        BestConfig.problem_key,
        BestConfig.objective,
    )
    return _best_records(s, query)


def _best_query() -> sa.Select[BestConfig, str, int | None, str | None]:
    """Best rows with their class's key, their producer (the row's job, else its trial's) and
    that job's team."""
    producer = sa.func.coalesce(BestConfig.job_id, Trial.job_id)
    return (
        sa.select(BestConfig, DeviceClass.key, producer, Job.team)
        .join(DeviceClass, DeviceClass.id == BestConfig.device_class_id)
        .outerjoin(Trial, BestConfig.trial_id == Trial.id)
        .outerjoin(Job, Job.id == producer)
    )


def _best_records(
    s: Session, query: sa.Select[BestConfig, str, int | None, str | None]
) -> list[BestRecord]:
    return [
        record(BestRecord, best, device_class_key=class_key, job_id=job_id, team=team)
        for best, class_key, job_id, team in s.execute(query).all()
    ]


def get_best_by_id(s: Session, best_id: int) -> BestRecord:
    """The best-config row ``best_id`` with its producer (as :func:`get_best`); NotFound if none."""
    found = _best_records(s, _best_query().where(BestConfig.id == best_id))
    if not found:
        raise NotFound(f"no best config with id {best_id}")
    return found[0]


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
    query = _best_query().where(DeviceClass.key == device_class_key, sa.or_(*due))
    return _best_records(s, query.order_by(BestConfig.id))


#: The PostgreSQL advisory lock key under which schedulers queue revalidation jobs.
_REVALIDATION_LOCK = 0x7466_7265_7661


def lock_revalidation_queue(s: Session) -> None:
    """Hold, until the transaction ends, the lock under which revalidation jobs are queued, so
    that two schedulers that see one new stack at once do not both queue its rows (PostgreSQL:
    an advisory transaction lock; SQLite: a write session is serialized already)."""
    if s.get_bind().dialect.name == "postgresql":
        s.execute(sa.select(sa.func.pg_advisory_xact_lock(_REVALIDATION_LOCK)))


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


def best_version(s: Session, kernel_name: str) -> tuple[int, datetime | None]:
    """(row count, newest ``updated_at``) of ``kernel_name``'s best configs: it changes with
    every write of them (a cache's validity stamp; one read of the key's leading column)."""
    count, newest = s.execute(
        sa.select(sa.func.count(BestConfig.id), sa.func.max(BestConfig.updated_at)).where(
            BestConfig.kernel_name == kernel_name
        )
    ).one()
    return int(count), newest

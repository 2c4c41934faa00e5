"""Drift history of stored bests: their re-timings, and per device class what ``/metrics``
exports of them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.errors import InvalidRecord
from db.models import BestConfig, DeviceClass, Environment, Retiming, StackMark, utcnow
from db.repository._rows import record
from db.states import RevalidationState


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
        out.append(record(RetimingRecord, row, **versions))
    return out


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
        sa.select(DeviceClass.key, BestConfig.revalidation, sa.func.count())
        .select_from(BestConfig)
        .join(DeviceClass, DeviceClass.id == BestConfig.device_class_id)
        .group_by(DeviceClass.key, BestConfig.revalidation)
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
        sa.select(
            StackMark.device_class_id.label("class_id"), StackMark.environment_id.label("env")
        )
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
            sa.select(DeviceClass.key, sa.func.count())
            .select_from(BestConfig)
            .join(DeviceClass, DeviceClass.id == BestConfig.device_class_id)
            .join(current, current.c.class_id == BestConfig.device_class_id)
            .where(
                BestConfig.environment_id.is_not(None),
                BestConfig.environment_id != current.c.env,
                sa.or_(
                    BestConfig.revalidated_environment_id.is_(None),
                    BestConfig.revalidated_environment_id != current.c.env,
                ),
            )
            .group_by(DeviceClass.key)
        ).all()
    )
    timed: dict[str, dict[str, int]] = {}
    for key, state, n in s.execute(
        sa.select(DeviceClass.key, Retiming.state, sa.func.count())
        .select_from(Retiming)
        .join(BestConfig, BestConfig.id == Retiming.best_id)
        .join(DeviceClass, DeviceClass.id == BestConfig.device_class_id)
        .group_by(DeviceClass.key, Retiming.state)
    ).all():
        timed.setdefault(key, {})[RevalidationState(state).value] = n
    return [
        ClassDrift(key, states.get(key, {}), int(stale.get(key, 0)), timed.get(key, {}))
        for key in sorted(set(states) | set(timed))
    ]

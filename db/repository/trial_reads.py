"""Reads of trials for what users see: a study's trials paged and sorted, its figures' inputs, the
prior of the ``learned`` sampler, a kernel's trials across device classes, the recent trial rate.

Every function returns plain data (records, tuples, dicts); nothing here writes.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.models import DeviceClass, Objective, Trial, TrialOutcome
from db.repository._rows import record
from db.repository.trials import VERDICT, TrialRecord


class TrialSort(str, enum.Enum):
    """What a study's trial page sorts by: ``time`` (the median) and ``compile`` put trials
    without one last in either order."""

    ID = "id"
    TIME = "time"
    OUTCOME = "outcome"
    COMPILE = "compile"


_SORT_COLUMNS = {
    TrialSort.ID: Trial.id,
    TrialSort.TIME: Trial.median_ms,
    TrialSort.OUTCOME: Trial.outcome,
    TrialSort.COMPILE: Trial.compile_s,
}


def study_trial_page(
    s: Session,
    study_id: int,
    *,
    sort: TrialSort = TrialSort.ID,
    descending: bool = False,
    outcome: TrialOutcome | None = None,
    limit: int = 50,
    offset: int = 0,
) -> tuple[int, list[TrialRecord]]:
    """How many trials study ``study_id`` has (of ``outcome``, if given; provisional rows
    included), and ``limit`` of them after ``offset`` in ``sort`` order, ties by id. The database
    sorts and pages, so a study of any size costs one page."""
    column = _SORT_COLUMNS[TrialSort(sort)]
    where = [Trial.study_id == study_id]
    if outcome is not None:
        where.append(Trial.outcome == outcome)
    total = s.scalar(sa.select(sa.func.count(Trial.id)).where(*where)) or 0
    ordered = column.desc() if descending else column.asc()
    rows = s.scalars(
        sa.select(Trial)
        .where(*where)
        .order_by(column.is_(None), ordered, Trial.id)
        .limit(limit)
        .offset(offset)
    ).all()
    return int(total), [record(TrialRecord, t) for t in rows]


def study_trial_stamp(s: Session, study_id: int) -> tuple[int, int]:
    """(row count, newest id; 0 if none) of study ``study_id``'s trials: trial rows are only
    appended, so an unchanged stamp means unchanged rows."""
    count, newest = s.execute(
        sa.select(sa.func.count(Trial.id), sa.func.max(Trial.id)).where(Trial.study_id == study_id)
    ).one()
    return int(count), int(newest or 0)


#: Trial columns the analysis reads (every one but the raw samples).
_ANALYSED = [c for c in Trial.__table__.c if c.name != "samples_ms"]


def study_final_trials(s: Session, study_id: int) -> list[TrialRecord]:
    """Study ``study_id``'s trials that are not provisional, oldest first, read column-wise (a
    study of 10,000 trials in a fraction of the ORM's time); ``samples_ms`` is left out (None)."""
    rows = s.execute(
        sa.select(*_ANALYSED)
        .where(Trial.study_id == study_id, Trial.provisional.is_(False))
        .order_by(Trial.id)
    )
    return [TrialRecord(samples_ms=None, **row._mapping) for row in rows]


def config_timed(s: Session, study_id: int, median_ms: float) -> dict[str, Any] | None:
    """The config of one ``ok`` trial of study ``study_id`` whose median is ``median_ms``
    (the study's fastest, as its counts found it), or None."""
    found = s.scalar(
        sa.select(Trial.config)
        .where(
            Trial.study_id == study_id,
            Trial.outcome == TrialOutcome.OK,
            Trial.median_ms == median_ms,
        )
        .limit(1)
    )
    return dict(found) if found is not None else None


@dataclass(frozen=True)
class OkTrial:
    """An ``ok`` trial of a kernel version as a prior sees it: where (the problem's canonical
    JSON, the class's key), what, and its median time."""

    problem_key: str
    device_class_key: str
    config: dict[str, Any]
    median_ms: float


def newest_ok_trials(s: Session, kernel_id: int, objective: Objective, limit: int) -> list[OkTrial]:
    """The newest ``limit`` ``ok`` trials with a time of kernel version ``kernel_id`` under
    ``objective``, on any problem and device class, oldest first."""
    rows = s.execute(
        sa.select(Trial.problem_key, DeviceClass.key, Trial.config, Trial.median_ms)
        .join(DeviceClass, DeviceClass.id == Trial.device_class_id)
        .where(
            Trial.kernel_id == kernel_id,
            Trial.objective == Objective(objective),
            Trial.outcome == TrialOutcome.OK,
            Trial.median_ms.is_not(None),
        )
        .order_by(Trial.id.desc())
        .limit(limit)
    ).all()
    return [
        OkTrial(problem, class_key, dict(config), float(ms))
        for problem, class_key, config, ms in reversed(rows)
    ]


#: Rows of one page of :func:`fastest_ok_configs`.
_FASTEST_PAGE = 64


def fastest_ok_configs(
    s: Session,
    kernel_ids: Sequence[int],
    objective: Objective,
    device_class_id: int,
    problem_key: str,
) -> Iterator[tuple[dict[str, Any], float]]:
    """(config, median ms) of every ``ok`` trial with a time of kernel versions ``kernel_ids``
    under ``objective`` on class ``device_class_id`` for ``problem_key``, fastest first. Read a
    page at a time, so a caller that stops at the first config it can use reads little further."""
    if not kernel_ids:
        return
    query = (
        sa.select(Trial.config, Trial.median_ms)
        .where(
            Trial.kernel_id.in_(kernel_ids),
            Trial.objective == Objective(objective),
            Trial.device_class_id == device_class_id,
            Trial.problem_key == problem_key,
            Trial.outcome == TrialOutcome.OK,
            Trial.median_ms.is_not(None),
        )
        .order_by(Trial.median_ms, Trial.id)
        .limit(_FASTEST_PAGE)
    )
    for page in itertools.count():
        rows = s.execute(query.offset(page * _FASTEST_PAGE)).all()
        for config, median_ms in rows:
            yield dict(config), float(median_ms)
        if len(rows) < _FASTEST_PAGE:
            return


def outcomes_since(s: Session, since: datetime) -> dict[TrialOutcome, int]:
    """How many trials were recorded at or after ``since``, per outcome (absent: none)."""
    rows = s.execute(
        sa.select(Trial.outcome, sa.func.count())
        .where(Trial.created_at >= since)
        .group_by(Trial.outcome)
    ).all()
    return {outcome: int(count) for outcome, count in rows}


def ok_problem_keys(s: Session, kernel_ids: Sequence[int], objective: Objective) -> list[str]:
    """The problem keys with an ``ok`` verdict (neither ``infra`` nor provisional) of any of
    ``kernel_ids`` under ``objective``, sorted."""
    return list(
        s.scalars(
            sa.select(Trial.problem_key)
            .where(
                Trial.kernel_id.in_(list(kernel_ids)),
                Trial.objective == objective,
                Trial.outcome == TrialOutcome.OK,
                *VERDICT,
            )
            .group_by(Trial.problem_key)
            .order_by(Trial.problem_key)
        )
    )


class ClassVerdict(NamedTuple):
    """The verdicts of one config on one device class (by its key) under one outcome: the
    fastest median among them (None: none has a time)."""

    device_class_key: str
    config_key: str
    outcome: TrialOutcome
    fastest_ms: float | None


def verdicts_by_class(
    s: Session, kernel_ids: Sequence[int], objective: Objective, problem_key: str
) -> list[ClassVerdict]:
    """Per (device class, config, outcome) the verdicts (neither ``infra`` nor provisional) of
    any of ``kernel_ids`` on ``problem_key`` under ``objective``, with their fastest median."""
    rows = s.execute(
        sa.select(DeviceClass.key, Trial.config_key, Trial.outcome, sa.func.min(Trial.median_ms))
        .join(DeviceClass, DeviceClass.id == Trial.device_class_id)
        .where(
            Trial.kernel_id.in_(list(kernel_ids)),
            Trial.objective == objective,
            Trial.problem_key == problem_key,
            *VERDICT,
        )
        .group_by(DeviceClass.key, Trial.config_key, Trial.outcome)
    ).all()
    return [ClassVerdict(*row) for row in rows]


def config_of(
    s: Session,
    kernel_ids: Sequence[int],
    objective: Objective,
    problem_key: str,
    device_class_key: str,
    config_key: str,
) -> dict[str, Any] | None:
    """The config whose key is ``config_key`` as a verdict of any of ``kernel_ids`` on
    ``problem_key`` and the class ``device_class_key`` under ``objective`` names it, or None."""
    found = s.scalar(
        sa.select(Trial.config)
        .join(DeviceClass, DeviceClass.id == Trial.device_class_id)
        .where(
            Trial.kernel_id.in_(list(kernel_ids)),
            Trial.objective == objective,
            Trial.problem_key == problem_key,
            DeviceClass.key == device_class_key,
            Trial.config_key == config_key,
            *VERDICT,
        )
        .limit(1)
    )
    return dict(found) if found is not None else None

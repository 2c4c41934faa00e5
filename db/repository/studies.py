"""Studies: one job's search of one (problem, device class)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.errors import NotFound
from db.models import DeviceClass, Study, StudyStatus, Trial, TrialOutcome
from db.repository._rows import coerce, get_or_create, record
from db.repository.catalog import DeviceClassRecord


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
    return get_or_create(
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
    target = coerce(StudyStatus, status, "study status")
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
        record(StudyRecord, study, device_class=record(DeviceClassRecord, cls))
        for study, cls in rows
    ]


def study_in_job(s: Session, job_id: int, study_id: int) -> bool:
    """Whether study ``study_id`` is one of job ``job_id``'s."""
    found = s.scalar(sa.select(Study.id).where(Study.id == study_id, Study.job_id == job_id))
    return found is not None


class StudyTrialCount(NamedTuple):
    """How many (``trials``) of a study's trials that are not provisional have one ``outcome``
    and ``reused`` flag, and their fastest median; ``outcome`` None (``trials`` 0): the study has
    no trial yet."""

    job_id: int
    study_id: int
    outcome: TrialOutcome | None
    reused: bool | None
    trials: int
    fastest_ms: float | None


def study_trial_counts(s: Session, job_ids: Sequence[int]) -> list[StudyTrialCount]:
    """Per study of ``job_ids``, its trials that are not provisional (a provisional verdict is
    measured again; its final row is the one that counts) grouped by outcome and reused flag, in
    one query; a study without trials has one row of outcome None."""
    rows = s.execute(
        sa.select(
            Study.job_id,
            Study.id,
            Trial.outcome,
            Trial.reused,
            sa.func.count(Trial.id),
            sa.func.min(Trial.median_ms),
        )
        .join(Trial, sa.and_(Trial.study_id == Study.id, ~Trial.provisional), isouter=True)
        .where(Study.job_id.in_(list(job_ids)))
        .group_by(Study.job_id, Study.id, Trial.outcome, Trial.reused)
    ).all()
    return [StudyTrialCount(*row) for row in rows]

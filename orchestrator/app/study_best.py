"""A study's best, decided once for every view of it (``job``, ``jobs``, the API and the page).

Where the study's key is decided (it no longer runs and the key has a stored best row, the one
this job wrote if it still holds, else the key's), that row is the study's best: its time (the
winner's in the final re-timing; the vendor path's where the vendor path won), its config, which
backend holds the key and the speedups of that re-timing. While the study runs (nothing promoted
yet), or where no row decides its key, its fastest ``ok`` trial is shown, marked ``so_far``:
not re-timed, so without speedups. A row written by a cancelled job is its fastest trial so far
(not re-timed); ``cancelled_job`` says so, as ``best`` marks it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from db.states import StudyStatus
from orchestrator.run.speedup import speedup

if TYPE_CHECKING:
    from db.repository import BestRecord

#: A key's identity among a kernel version's best rows: (problem key, device class key).
Key = tuple[str, str]


class BestSource(str, enum.Enum):
    """Where a study's best comes from."""

    #: The key's stored best row, decided by a job's final re-timing.
    DECIDED = "decided"
    #: The study's fastest ``ok`` trial: it still runs, or no row decides its key.
    SO_FAR = "so_far"


@dataclasses.dataclass(frozen=True)
class StudyBest:
    """A study's best as every view shows it (see the module doc); times in ms, None: not
    measured in the deciding re-timing."""

    source: BestSource
    time_ms: float
    config: dict[str, Any] | None
    job_id: int | None = None
    cancelled_job: bool = False
    backend: str | None = None
    vendor: str | None = None
    triton_ms: float | None = None
    vendor_ms: float | None = None
    default_ms: float | None = None
    noise: float | None = None
    speedup_vs_default: float | None = None
    speedup_vs_vendor: float | None = None


def rows_by_key(rows: Iterable[BestRecord], job_id: int) -> dict[Key, BestRecord]:
    """Per key, its best row (a key has one per triton minor): one that job ``job_id`` produced
    where there is one, the fastest of those."""
    out: dict[Key, BestRecord] = {}
    for row in rows:
        key = (row.problem_key, row.device_class_key)
        if key not in out or _rank(row, job_id) < _rank(out[key], job_id):
            out[key] = row
    return out


def _rank(row: BestRecord, job_id: int) -> tuple[bool, float]:
    return (row.job_id != job_id, row.time_ms)


def study_best(
    status: StudyStatus,
    row: BestRecord | None,
    fastest_ms: float | None,
    fastest_config: Mapping[str, Any] | None = None,
    cancelled_jobs: frozenset[int] | set[int] = frozenset(),
) -> StudyBest | None:
    """The study's best from its key's ``row`` (None: none stored) and its fastest ``ok`` trial
    (None: none yet); None when it has neither."""
    if row is not None and status is not StudyStatus.RUNNING:
        return StudyBest(
            source=BestSource.DECIDED,
            time_ms=row.time_ms,
            config=dict(row.config) if row.config else None,
            job_id=row.job_id,
            cancelled_job=row.job_id is not None and row.job_id in cancelled_jobs,
            backend=row.backend.value,
            vendor=row.vendor,
            triton_ms=row.triton_ms,
            vendor_ms=row.vendor_ms,
            default_ms=row.default_ms,
            noise=row.noise,
            speedup_vs_default=speedup(row.default_ms, row.time_ms),
            speedup_vs_vendor=speedup(row.vendor_ms, row.time_ms),
        )
    if fastest_ms is None:
        return None
    config = dict(fastest_config) if fastest_config is not None else None
    return StudyBest(source=BestSource.SO_FAR, time_ms=fastest_ms, config=config)

"""Vendor-path measurements beside the trials."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.errors import InvalidRecord
from db.models import Objective, TrialOutcome, VendorTrial
from db.repository._rows import coerce, record


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
            "outcome": coerce(TrialOutcome, f["outcome"], "trial outcome"),
            "objective": coerce(Objective, f.get("objective", Objective.KERNEL), "objective"),
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
    return {row.vendor: record(VendorTrialRecord, row) for row in rows}


def vendor_trials_for_study(s: Session, study_id: int) -> list[VendorTrialRecord]:
    """Every vendor measurement study ``study_id`` made, oldest first."""
    rows = s.scalars(
        sa.select(VendorTrial).where(VendorTrial.study_id == study_id).order_by(VendorTrial.id)
    )
    return [record(VendorTrialRecord, row) for row in rows]

"""The database prior of the ``learned`` sampler: a kernel version's ok trials on every problem and
device class, read-only."""

from __future__ import annotations

import json

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.models import DeviceClass, Objective, Trial, TrialOutcome
from orchestrator.study.samplers.learned import PriorTrial

#: Newest trials a prior holds at most (the sampler's proposal cost is measured at this size).
PRIOR_LIMIT = 10_000


def prior_trials(
    s: Session,
    kernel_id: int,
    objective: Objective | str = Objective.KERNEL,
    *,
    limit: int = PRIOR_LIMIT,
) -> list[PriorTrial]:
    """The newest ``limit`` ``ok`` trials of kernel version ``kernel_id`` under ``objective``,
    on any problem and device class, as :class:`PriorTrial` rows (oldest first)."""
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
        PriorTrial(json.loads(problem), device_class, dict(config), float(ms))
        for problem, device_class, config, ms in reversed(rows)
    ]

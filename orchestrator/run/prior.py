"""The database prior of the ``learned`` sampler: a kernel version's ok trials on every problem and
device class, read-only."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from db import Objective, repository
from orchestrator.study.samplers.learned import PriorTrial

if TYPE_CHECKING:
    from db import Session

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
    rows = repository.newest_ok_trials(s, kernel_id, Objective(objective), limit)
    return [
        PriorTrial(json.loads(t.problem_key), t.device_class_key, t.config, t.median_ms)
        for t in rows
    ]

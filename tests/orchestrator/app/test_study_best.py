"""The one rule for a study's best (orchestrator.app.study_best): a decided key's row once the
study ended, its fastest trial (marked so far) while it runs; this job's row first."""

from __future__ import annotations

from datetime import datetime, timezone

from db import BestBackend, Objective, StudyStatus
from db.repository import BestRecord
from orchestrator.app.study_best import BestSource, rows_by_key, study_best

KEY = ('{"M":64}', "cpu")


def _row(job_id: int, time_ms: float, **decision: object) -> BestRecord:
    return BestRecord(
        id=job_id,
        kernel_name="matmul",
        kernel_version="v",
        problem_key=KEY[0],
        device_class_id=1,
        device_class_key=KEY[1],
        triton_minor="3.6",
        objective=Objective.KERNEL,
        config={"BLOCK_M": 64},
        time_ms=time_ms,
        trial_id=None,
        job_id=job_id,
        environment_id=None,
        updated_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
        team="alpha",
        **decision,  # type: ignore[arg-type]
    )


def test_a_running_study_shows_its_fastest_trial_so_far_without_speedups() -> None:
    row = _row(1, 0.5, default_ms=1.0)
    best = study_best(StudyStatus.RUNNING, row, 0.7, {"BLOCK_M": 32})
    assert best is not None and best.source is BestSource.SO_FAR
    assert best.time_ms == 0.7 and best.config == {"BLOCK_M": 32}
    assert best.speedup_vs_default is None and best.backend is None
    assert study_best(StudyStatus.RUNNING, None, None) is None


def test_an_ended_study_shows_its_keys_decided_row_and_its_speedups() -> None:
    row = _row(
        3, 0.2, backend=BestBackend.VENDOR, vendor="torch.matmul", vendor_ms=0.2,
        triton_ms=0.25, default_ms=0.5,
    )  # fmt: skip
    best = study_best(StudyStatus.DONE, row, 0.19, {"BLOCK_M": 32}, {3})
    assert best is not None and best.source is BestSource.DECIDED
    # The re-timed winner, not the (faster, earlier) trial.
    assert best.time_ms == 0.2 and best.config == {"BLOCK_M": 64} and best.job_id == 3
    assert best.backend == "vendor" and best.vendor == "torch.matmul" and best.cancelled_job
    assert best.speedup_vs_default == 2.5 and best.speedup_vs_vendor == 1.0
    # No row decides the key: the fastest trial, so far.
    left = study_best(StudyStatus.FAILED, None, 0.19)
    assert left is not None and left.source is BestSource.SO_FAR


def test_rows_by_key_prefer_this_jobs_row_then_the_fastest() -> None:
    mine, faster, other = _row(2, 0.4), _row(5, 0.3), _row(6, 0.35)
    assert rows_by_key([faster, mine, other], 2)[KEY] is mine
    assert rows_by_key([other, faster], 2)[KEY] is faster

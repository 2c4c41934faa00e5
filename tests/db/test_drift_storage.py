"""The drift tables on SQLite and PostgreSQL: re-timings appended and read back newest-limited,
stacks marked once per (class, environment), which bests are due in a new stack or after a
while, revalidation jobs counted per team, and the per-class counts /metrics exports."""

from __future__ import annotations

from datetime import timedelta

import pytest

from db import Database, JobKind, JobStatus, repository, utcnow
from db.errors import InvalidRecord
from db.states import RevalidationState

CLASS = "NVIDIA H200"


def _seed(db: Database) -> tuple[int, int, int, list[int]]:
    """Two bests measured in environment ``old``; returns (class id, old env, new env, best ids)."""
    with db.session() as s:
        cls = repository.ensure_device_class(s, CLASS, "nvidia", CLASS, "sm_90")
        old = repository.ensure_environment(s, cls, "d", "cuda 12.8", "3.5.0", "2.8.0")
        new = repository.ensure_environment(s, cls, "d", "cuda 12.8", "3.6.0", "2.8.0")
        kernel = repository.ensure_kernel(s, "matmul", "v1", "s1")
        job = repository.create_job(s, kernel, {"kernel": "matmul"}, "alpha")
        for key in ("p1", "p2"):
            repository.upsert_best(
                s, "matmul", "v1", key, cls, "3.5", {"BLOCK_M": 64}, 1.0, None, job, old
            )
        ids = [b.id for b in repository.get_best(s, "matmul", device_class_key=CLASS)]
    return cls, old, new, ids


def test_retimings_are_kept_in_order_with_their_environment(db: Database) -> None:
    _, _, new, (first, second) = _seed(db)
    with db.session() as s:
        for i in range(5):
            repository.record_retiming(
                s,
                first,
                RevalidationState.HOLDS if i < 3 else RevalidationState.REGRESSED,
                1.0,
                1.0 + 0.1 * i,
                environment_id=new,
                noise=0.02,
                changed="triton 3.5.0 -> 3.6.0",
            )
        repository.record_retiming(s, second, RevalidationState.FAILED, 1.0, None)
        with pytest.raises(InvalidRecord):
            repository.record_retiming(s, second, RevalidationState.HOLDS, 1.0, float("nan"))
    with db.session(readonly=True) as s:
        newest = repository.retimings(s, first, limit=3)
        failed = repository.retimings(s, second)
    assert [round(r.time_ms or 0, 2) for r in newest] == [1.2, 1.3, 1.4]  # newest 3, oldest first
    assert {(r.triton, r.noise) for r in newest} == {("3.6.0", 0.02)}
    assert [(r.state, r.time_ms, r.triton) for r in failed] == [
        (RevalidationState.FAILED, None, None)
    ]


def test_a_new_stack_makes_bests_due_until_revalidated_there(db: Database) -> None:
    cls, old, new, (first, second) = _seed(db)
    with db.session() as s:
        assert repository.mark_stack(s, cls, new) is True
        assert repository.mark_stack(s, cls, new) is False  # seen again: last_seen moves
        assert [b.id for b in repository.bests_to_revalidate(s, CLASS, old)] == []
        assert [b.id for b in repository.bests_to_revalidate(s, CLASS, new)] == [first, second]
        repository.mark_revalidation(s, first, RevalidationState.REGRESSED, 1.5, new)
        assert [b.id for b in repository.bests_to_revalidate(s, CLASS, new)] == [second]
        later = utcnow() + timedelta(days=1)
        due = repository.bests_to_revalidate(s, CLASS, new, changed=False, checked_before=later)
        assert [b.team for b in due] == ["alpha", "alpha"]
    with db.session(readonly=True) as s:
        (drift,) = repository.drift_by_class(s)
    assert drift.device_class == CLASS
    assert drift.states == {"regressed": 1, "unchecked": 1}
    assert drift.stale == 1  # the second: measured on 3.5.0, the class's newest stack is 3.6.0


def test_revalidation_jobs_are_counted_per_team_and_listed_while_open(db: Database) -> None:
    with db.session() as s:
        kernel = repository.ensure_kernel(s, "matmul", "v1", "s1")
        spec = {"kind": "revalidate", "kernel": "matmul", "best_ids": [1]}
        a = repository.create_job(s, kernel, spec, "alpha", kind=JobKind.REVALIDATE)
        repository.create_job(s, kernel, spec, None, kind=JobKind.REVALIDATE)
        repository.create_job(s, kernel, {"kernel": "matmul"}, "alpha")
        repository.set_job_status(s, a, JobStatus.CANCELLED)
        since = utcnow() - timedelta(hours=1)
        assert repository.count_jobs_since(s, JobKind.REVALIDATE, "alpha", since) == 1
        assert repository.count_jobs_since(s, JobKind.REVALIDATE, None, since) == 1
        assert repository.count_jobs_since(s, JobKind.REVALIDATE, "beta", since) == 0
        open_jobs = repository.open_jobs_of_kind(s, JobKind.REVALIDATE)
    assert [(j.team, j.kind) for j in open_jobs] == [(None, JobKind.REVALIDATE)]

"""The driver on an in-process pool (LocalPool, replayed synthetic landscapes) and SQLite: no Ray."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from db import Database, JobStatus, repository
from db.models import Trial
from orchestrator.app.results import best_configs
from orchestrator.errors import JobSpecError
from orchestrator.run.driver import Driver, plan_job, submit_job
from orchestrator.run.jobs import JobSpec
from orchestrator.run.local_pool import LocalPool
from orchestrator.run.worker import WorkerPlan
from orchestrator.study import samplers
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from tests.orchestrator.conftest import A100, H200

SMALL = {"M": 256, "N": 256, "K": 256, "dtype": "float16"}
BIG = {"M": 1024, "N": 1024, "K": 1024, "dtype": "float16"}
H200_CLASS, A100_CLASS = f"replay:{H200}", f"replay:{A100}"


@pytest.fixture
def pool(landscapes: dict[str, list[Path]]) -> Iterator[LocalPool]:
    """Two replay workers of the H200 landscapes, one of the A100's."""
    h200 = WorkerPlan("replay", tuple(str(p) for p in landscapes[H200]))
    a100 = WorkerPlan("replay", tuple(str(p) for p in landscapes[A100]))
    local = LocalPool([h200, h200, a100])
    yield local
    local.shutdown()


def spec(**fields: object) -> JobSpec:
    return JobSpec.from_mapping({"kernel": "matmul", "problems": [SMALL, BIG], **fields})


def rows(database: Database, job_id: int) -> list[Trial]:
    with database.session(readonly=True) as s:
        found = list(s.scalars(sa.select(Trial).where(Trial.job_id == job_id).order_by(Trial.id)))
        s.expunge_all()
    return found


def calls(pool: LocalPool) -> int:
    return sum(len(log) for log in pool.call_logs().values())


def test_a_job_runs_every_study_promotes_and_a_second_job_reuses_it_all(
    pool: LocalPool, database: Database
) -> None:
    first = Driver(database, pool, retime_rounds=1, poll_s=0.0).run(
        submit_job(database, spec(trials=8), pool)
    )
    assert first.status is JobStatus.DONE and len(first.winners) == 4
    trials = rows(database, first.job_id)
    assert len(trials) == 4 * 8 == calls(pool)
    per_study = Counter(t.study_id for t in trials)
    assert set(per_study.values()) == {8}
    assert all(len({t.config_key for t in trials if t.study_id == s}) == 8 for s in per_study)
    with database.session(readonly=True) as s:
        best = repository.get_best(s, "matmul", kernel_version=get_spec("matmul").version_hash())
    assert sorted(b.device_class_key for b in best) == sorted([H200_CLASS, A100_CLASS] * 2)
    for winner in first.winners.values():
        assert winner.promoted and winner.time_ms > 0 and winner.config

    before = calls(pool)
    second = Driver(database, pool, retime_rounds=1, poll_s=0.0).run(
        submit_job(database, spec(trials=8), pool)
    )
    assert second.status is JobStatus.DONE
    assert calls(pool) == before  # every config answered from the database
    again = rows(database, second.job_id)
    assert len(again) == 32 and all(t.reused for t in again)


def test_stop_hands_the_job_back_queued_with_in_flight_trials_recorded_and_resume_finishes(
    pool: LocalPool, database: Database
) -> None:
    job_id = submit_job(database, spec(trials=10, device_classes=[H200_CLASS]), pool)
    stopped = Driver(database, pool, poll_s=0.0, stop=lambda: len(rows(database, job_id)) >= 5).run(
        job_id
    )
    assert stopped.status is JobStatus.QUEUED and stopped.winners == {}
    kept = rows(database, job_id)
    assert len(kept) > 5  # the trials in flight when it stopped were waited for and recorded
    assert len(kept) == calls(pool) and pool.in_flight == 0
    with database.session(readonly=True) as s:
        job = repository.get_job(s, job_id)
        assert job.status is JobStatus.QUEUED and job.finished_at is None
        assert repository.get_best(s, "matmul") == []  # nothing promoted
    resumed = Driver(database, pool, retime_rounds=1, poll_s=0.0).run(job_id)
    assert resumed.status is JobStatus.DONE
    trials = rows(database, job_id)
    assert len(trials) == 2 * 10 == calls(pool)  # the budget, nothing measured twice
    assert all(n == 1 for n in Counter((t.study_id, t.config_key) for t in trials).values())


def test_a_cancelled_job_promotes_its_fastest_trials_marked_and_resume_replaces_them(
    pool: LocalPool, database: Database
) -> None:
    job_id = submit_job(database, spec(trials=10, device_classes=[H200_CLASS]), pool)

    def cancel_after_five() -> bool:  # as `tunefleet cancel` does, while the job runs
        if len(rows(database, job_id)) >= 5:
            with database.session() as s:
                repository.request_cancel(s, job_id)
        return False

    cancelled = Driver(database, pool, poll_s=0.0, stop=cancel_after_five).run(job_id)
    assert cancelled.status is JobStatus.CANCELLED and len(cancelled.winners) == 2
    assert all(not w.retimed and w.speedup_vs_default is None for w in cancelled.winners.values())
    trials = rows(database, job_id)
    bests = best_configs(database, kernel="matmul", device_class=H200_CLASS)
    assert len(bests) == 2 and all(b.job_id == job_id and b.cancelled_job for b in bests)
    for b in bests:  # each study's fastest ok trial, at its trial time
        key = problem_key(b.problem)
        ok = [t.median_ms for t in trials if t.problem_key == key and t.median_ms]
        assert b.time_ms == min(ok)

    resumed = Driver(database, pool, retime_rounds=1, poll_s=0.0).run(job_id)
    assert resumed.status is JobStatus.DONE
    trials = rows(database, job_id)
    assert len(trials) == 2 * 10
    bests = best_configs(database, kernel="matmul", device_class=H200_CLASS)
    assert len(bests) == 2 and not any(b.cancelled_job for b in bests)
    for b in bests:  # noise-free replay: the re-timed winner is the fastest trial of all
        key = problem_key(b.problem)
        assert b.time_ms == min(t.median_ms for t in trials if t.problem_key == key and t.median_ms)


def test_a_sampler_that_does_not_fit_the_space_is_refused_before_anything_is_written(
    pool: LocalPool, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(samplers, "_registered", {})
    samplers.register(
        "tiny-only",
        samplers.get("random").factory,
        help="random, for spaces of at most 2 parameters",
        fits=lambda space, limits: (
            "more than 2 parameters" if len(space.params_for(limits.vendor)) > 2 else None
        ),
    )
    job = spec(sampler="tiny-only")
    with pytest.raises(JobSpecError, match="sampler tiny-only does not fit the matmul space"):
        plan_job(job, job.kernel_spec(), pool)
    with pytest.raises(JobSpecError):
        submit_job(database, job, pool)
    with database.session(readonly=True) as s:
        assert repository.list_jobs(s) == []


def test_the_sampler_is_built_with_its_studys_context(
    pool: LocalPool, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[samplers.SamplerContext] = []

    def factory(context: samplers.SamplerContext) -> Any:
        seen.append(context)
        return samplers.get("random").factory(context)

    monkeypatch.setattr(samplers, "_registered", {})
    samplers.register("spy", factory, help="random, remembering its context")
    job = spec(problems=[SMALL], device_classes=[H200_CLASS], sampler="spy", trials=3, seed=7)
    assert (
        Driver(database, pool, retime_rounds=1, poll_s=0.0)
        .run(submit_job(database, job, pool))
        .status
        is JobStatus.DONE
    )
    (context,) = seen
    assert (context.seed, context.budget, context.device_class) == (7, 3, H200_CLASS)
    assert context.problem == SMALL and context.kernel is not None
    assert context.kernel.name == "matmul"


def test_a_job_looks_up_each_environment_once_not_once_per_worker(
    pool: LocalPool, database: Database
) -> None:
    looked_up: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "FROM tf_environments" in statement:
            looked_up.append(statement)

    sa.event.listen(database.engine, "before_cursor_execute", note)
    try:
        result = Driver(database, pool, retime_rounds=1, poll_s=0.0).run(
            submit_job(database, spec(trials=8), pool)
        )
    finally:
        sa.event.remove(database.engine, "before_cursor_execute", note)
    assert result.status is JobStatus.DONE
    environments = {t.environment_id for t in rows(database, result.job_id)}
    workers = {t.worker for t in rows(database, result.job_id)}
    # Two H200 workers share one environment; the A100's is the other.
    assert len(workers) == 3 and len(environments) == 2
    assert len(looked_up) == len(environments)

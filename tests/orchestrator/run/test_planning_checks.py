"""plan_job refuses, before anything is written, a problem whose inputs exceed a class's memory
(in-process replay pool of the synthetic H200 landscape, which records no memory: the device
table's 141 GB for its class is the limit), and a problem its kernel cannot run on a class (FP8 on
the A100's replayed class)."""

from __future__ import annotations

from pathlib import Path

import pytest

from db import Database, repository
from orchestrator.errors import JobSpecError
from orchestrator.run.driver import plan_job, submit_job
from orchestrator.run.jobs import JobSpec
from orchestrator.run.local_pool import LocalPool
from orchestrator.run.planning import device_memory, oversized
from orchestrator.run.worker import WorkerPlan
from search_spaces.problem import Problem, problem_key
from search_spaces.registry import get_spec
from tests.orchestrator.conftest import A100

HUGE: Problem = {"M": 262144, "N": 262144, "K": 262144, "dtype": "float16"}  # 3 * 128 GiB of fp16


@pytest.fixture
def pool(h200_pool: LocalPool) -> LocalPool:
    return h200_pool


def test_a_problem_larger_than_the_device_memory_is_refused_up_front(
    pool: LocalPool, database: Database
) -> None:
    memory = device_memory(next(iter(pool.classes().values())))
    assert 100 * 2**30 < memory < 384 * 2**30
    job = JobSpec.from_mapping({"kernel": "matmul", "problems": [HUGE]})
    with pytest.raises(JobSpecError) as err:
        plan_job(job, job.kernel_spec(), pool)
    message = str(err.value)
    assert "needs 384 GiB" in message and f"{memory / 2**30:.3g} GiB of device memory" in message
    assert "give a smaller problem" in message and "\n" not in message
    with pytest.raises(JobSpecError):
        submit_job(database, job, pool)
    with database.session(readonly=True) as s:
        assert repository.list_jobs(s) == []


def test_oversized_is_none_when_it_fits_or_memory_is_unknown() -> None:
    matmul = get_spec("matmul")
    small: Problem = {"M": 64, "N": 64, "K": 64, "dtype": "float16"}
    assert oversized(matmul, small, 2**30) is None
    assert oversized(matmul, HUGE, 0) is None
    assert oversized(matmul, HUGE, 2**30) is not None


def test_a_plans_problem_key_is_computed_once(pool: LocalPool) -> None:
    problem: Problem = {"N": 256, "M": 256, "K": 256, "dtype": "float16"}
    job = JobSpec.from_mapping({"kernel": "matmul", "problems": [problem]})
    (plan,) = plan_job(job, job.kernel_spec(), pool)
    assert plan.problem_key == problem_key(problem)
    assert plan.problem_key is plan.problem_key  # one string, not a new one per trial row


def test_an_fp8_problem_on_a_class_without_fp8_is_refused_up_front(
    landscapes: dict[str, list[Path]], database: Database
) -> None:
    job = JobSpec.from_mapping({"kernel": "fp8_matmul", "problems": ["M=16,N=7168,K=2048"]})
    a100 = LocalPool([WorkerPlan("replay", tuple(str(p) for p in landscapes[A100]))])
    try:
        with pytest.raises(JobSpecError) as err:
            plan_job(job, job.kernel_spec(), a100)
        message = str(err.value)
        assert "needs FP8 tensor cores" in message and "sm_80" in message
        assert "\n" not in message
        with pytest.raises(JobSpecError):
            submit_job(database, job, a100)
    finally:
        a100.shutdown()
    with database.session(readonly=True) as s:
        assert repository.list_jobs(s) == []

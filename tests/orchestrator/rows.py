"""Rows a test writes through the repository as a driver would: a study with trials of known
outcomes, a stored best config."""

from __future__ import annotations

from typing import Any

from db import Database, repository
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from search_spaces.space import config_key

#: A small valid matmul config; the trials of ``add_study`` vary its BLOCK_K.
CONFIG: dict[str, Any] = {
    "BLOCK_M": 16,
    "BLOCK_N": 16,
    "BLOCK_K": 16,
    "GROUP_M": 1,
    "SPLIT_K": 1,
    "num_warps": 1,
    "num_stages": 1,
}


def add_study(
    database: Database, job_id: int, problem: dict[str, Any], outcomes: list[tuple[str, float]]
) -> int:
    """A study of ``job_id`` on class cpu with one trial per (outcome, median), distinct configs,
    the first one reused; its id."""
    with database.session() as s:
        job = repository.get_job(s, job_id)
        cls = repository.ensure_device_class(s, "cpu", "cpu", "cpu", "interpreter")
        key = problem_key(problem)
        study = repository.ensure_study(
            s, job_id, job.kernel_id, key, problem, cls, "local", f"s{job_id}{key}"
        )
        for i, (outcome, median) in enumerate(outcomes):
            config = {**CONFIG, "BLOCK_K": 16 * (i + 1)}
            repository.record_trial(
                s,
                kernel_id=job.kernel_id,
                problem_key=key,
                device_class_id=cls,
                config=config,
                config_key=config_key(config),
                outcome=outcome,
                job_id=job_id,
                study_id=study,
                median_ms=median if outcome == "ok" else None,
                reused=i == 0,
            )
    return study


def store_best(database: Database, job_id: int, class_key: str, problem: dict[str, Any]) -> None:
    """CONFIG at 0.5 ms as the best of the installed matmul on ``problem`` and ``class_key``."""
    kernel = get_spec("matmul")
    with database.session() as s:
        class_id = repository.ensure_device_class(s, class_key, "cpu", class_key, "interpreter")
        repository.upsert_best(
            s,
            "matmul",
            kernel.version_hash(),
            problem_key(problem),
            class_id,
            "3.6",
            CONFIG,
            0.5,
            None,
            job_id,
            None,
        )

"""The database prior: a kernel version's ok trials of one objective, on every problem and device
class, on SQLite and PostgreSQL."""

from __future__ import annotations

from db import Database, repository
from orchestrator.run.prior import prior_trials
from orchestrator.study.samplers.learned import PriorTrial
from search_spaces.problem import Problem, problem_key
from search_spaces.space import Config, config_key


def test_reads_ok_trials_of_the_kernel_version_and_objective(db: Database) -> None:
    small: Problem = {"M": 16, "N": 64, "K": 64, "dtype": "float16"}
    large: Problem = {"M": 1024, "N": 64, "K": 64, "dtype": "float16"}
    config: Config = {"BLOCK_M": 16, "num_warps": 4}
    with db.session() as s:
        kernel = repository.ensure_kernel(s, "matmul", "v1", "space1")
        other_version = repository.ensure_kernel(s, "matmul", "v2", "space2")
        h200 = repository.ensure_device_class(s, "nvidia/H200", "nvidia", "NVIDIA H200", "sm_90")
        a100 = repository.ensure_device_class(s, "nvidia/A100", "nvidia", "NVIDIA A100", "sm_80")

        def trial(
            kernel_id: int,
            problem: Problem,
            cls: int,
            outcome: str,
            ms: float | None,
            objective: str = "kernel",
        ) -> None:
            repository.record_trial(
                s,
                kernel_id=kernel_id,
                problem_key=problem_key(problem),
                device_class_id=cls,
                config=config,
                config_key=config_key(config),
                outcome=outcome,
                median_ms=ms,
                objective=objective,
            )

        trial(kernel, small, h200, "ok", 1.0)
        trial(kernel, large, a100, "ok", 2.0)
        trial(kernel, large, h200, "compile_error", None)  # not ok: left out
        trial(kernel, large, h200, "ok", 3.0, objective="graph")  # another objective
        trial(other_version, small, h200, "ok", 4.0)  # another kernel version
    with db.session(readonly=True) as s:
        got = prior_trials(s, kernel)
        graph = prior_trials(s, kernel, "graph")
        newest = prior_trials(s, kernel, limit=1)
    assert got == [
        PriorTrial(small, "nvidia/H200", config, 1.0),
        PriorTrial(large, "nvidia/A100", config, 2.0),
    ]
    assert [t.time_ms for t in graph] == [3.0]
    assert [t.time_ms for t in newest] == [2.0]

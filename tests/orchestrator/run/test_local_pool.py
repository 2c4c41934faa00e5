"""The in-process pool's re-timing: a class's jobs in one call to its worker, each answer the
replayed time of its own configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.run.local_pool import LocalPool
from orchestrator.run.pool import RetimeJob
from orchestrator.run.worker import TrialWorker, WorkerPlan
from search_spaces.problem import Problem, problem_key
from search_spaces.space import Config, config_key
from tests.orchestrator.conftest import A100, H200
from workers.landscape import read_landscape

SMALL: Problem = {"M": 256, "N": 256, "K": 256, "dtype": "float16"}
BIG: Problem = {"M": 1024, "N": 1024, "K": 1024, "dtype": "float16"}


def test_retime_takes_a_class_in_one_call_and_answers_each_job(
    landscapes: dict[str, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    lands = {d: [read_landscape(p) for p in paths] for d, paths in landscapes.items()}

    def fastest(device: str, problem: Problem, n: int) -> list[Config]:
        (land,) = [x for x in lands[device] if x.problem == problem]
        ok = sorted(
            (r for r in land.results if r.time_ms is not None), key=lambda r: r.time_ms or 0
        )
        return [dict(r.config) for r in ok[:n]]

    calls: list[int] = []
    real = TrialWorker.retime

    def counted(self: TrialWorker, jobs: list[Any], rounds: int) -> list[list[list[float]]]:
        calls.append(len(jobs))
        return real(self, jobs, rounds)

    monkeypatch.setattr(TrialWorker, "retime", counted)
    h200, a100 = f"replay:{H200}", f"replay:{A100}"
    jobs: list[RetimeJob] = [
        (h200, "matmul", SMALL, fastest(H200, SMALL, 1)),
        (a100, "matmul", SMALL, fastest(A100, SMALL, 2)),
        (h200, "matmul", BIG, fastest(H200, BIG, 3)),
        (a100, "matmul", BIG, []),
        ("replay:nowhere", "matmul", BIG, fastest(H200, BIG, 1)),
    ]
    pool = LocalPool(
        [WorkerPlan("replay", tuple(map(str, landscapes[d]))) for d in (H200, A100, H200)]
    )
    try:
        answers = pool.retime(jobs, rounds=2)
    finally:
        pool.shutdown()
    assert sorted(calls) == [1, 2]  # one call per class, to one of its workers
    assert answers[3] is None and answers[4] is None  # no configs; no worker of the class
    for (class_key, _, problem, configs), medians in zip(jobs[:3], answers[:3], strict=True):
        (land,) = [x for x in lands[class_key.removeprefix("replay:")] if x.problem == problem]
        times = {config_key(r.config): r.time_ms for r in land.results}
        assert land.problem_key == problem_key(problem)
        assert medians == [[times[config_key(c)]] * 2 for c in configs]

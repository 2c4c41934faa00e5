"""The compile pool: GPU-only behaviour (skipped here) and the rules checked on any machine."""

from __future__ import annotations

import pytest

from tests.gpu import needs_gpu
from workers.compile_pool import CompilePool
from workers.device import Backend
from workers.errors import RunnerConfigError
from workers.measurement import Outcome
from workers.runner import RunnerOptions, TrialRequest, TrialRunner

PROBLEM = {"M": 256, "N": 256, "K": 256, "dtype": "float16"}


def test_pool_refuses_the_interpreter() -> None:
    with pytest.raises(ValueError, match="GPU backend"):
        CompilePool(Backend.INTERPRETER, 2, None, 10.0)


def test_options_refuse_compile_workers_for_the_interpreter() -> None:
    with pytest.raises(RunnerConfigError, match="compile_workers"):
        RunnerOptions(Backend.INTERPRETER, compile_workers=2)
    with pytest.raises(RunnerConfigError, match="compile_workers"):
        RunnerOptions(Backend.CUDA, compile_workers=-1)


def test_unsubmitted_wait_returns_none_without_starting_processes() -> None:
    pool = CompilePool(Backend.CUDA, 2, None, 10.0)
    assert pool.wait("matmul", PROBLEM, {"BLOCK_M": 16}) is None
    pool.close()


@needs_gpu
def test_pool_compiles_ahead_and_trials_still_measure() -> None:
    from search_spaces import get_spec
    from workers.device import detect

    fingerprint = detect("auto")[0]
    backend = fingerprint.backend
    default = get_spec("matmul").default_for(fingerprint.limits())
    configs = [
        {**default, "BLOCK_M": bm, "BLOCK_N": bn, "GROUP_M": 8, "SPLIT_K": 1}
        for bm, bn in ((32, 32), (64, 32), (64, 64), (32, 64))
    ]
    options = RunnerOptions.for_backend(backend, compile_workers=2)
    with TrialRunner(options) as runner:
        requests = [TrialRequest("matmul", PROBLEM, c) for c in configs]
        for r in requests:
            runner.prefetch(r)
        results = [runner.run(r) for r in requests]
    assert [m.outcome for m in results] == [Outcome.OK] * len(configs)
    assert all(m.median_ms is not None and m.median_ms > 0 for m in results)

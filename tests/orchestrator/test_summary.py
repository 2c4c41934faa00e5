"""Honest speedups in a job's summary: the best config's own trial against the median ok trial
and the default's trial of the same study; a job whose best is the default reports 1.00x."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from db import Database, JobStatus, repository
from orchestrator.bundle_export import default_config
from orchestrator.driver import Driver, submit_job
from orchestrator.jobs import JobSpec
from orchestrator.local_pool import LocalPool
from orchestrator.summary import collect
from search_spaces.registry import get_spec
from search_spaces.space import config_key

SMALL = {"M": 256, "N": 256, "K": 256, "dtype": "float16"}


@pytest.fixture
def pool(h200_pool: LocalPool) -> LocalPool:
    return h200_pool


def _run(database: Database, pool: LocalPool, trials: int) -> dict[str, Any]:
    spec = JobSpec.from_mapping({"kernel": "matmul", "problems": [SMALL], "trials": trials})
    result = Driver(database, pool, retime_rounds=1, poll_s=0.0).run(
        submit_job(database, spec, pool)
    )
    assert result.status is JobStatus.DONE
    return collect(database, result.job_id)


def test_speedups_compare_trials_with_trials(pool: LocalPool, database: Database) -> None:
    summary = _run(database, pool, trials=12)
    (study,) = summary["studies"]
    with database.session(readonly=True) as s:
        (row,) = repository.studies_for_job(s, int(summary["job"]))
        trials = repository.trials_for_study(s, row.id)
        default_key = config_key(default_config(get_spec("matmul"), row.device_class))
    ok = {t.config_key: t.median_ms for t in trials if t.median_ms}
    own = ok[config_key(study["best"]["config"])]
    assert study["best_trial_ms"] == own
    assert study["speedup_vs_median"] == pytest.approx(statistics.median(ok.values()) / own)
    assert study["speedup_vs_default"] == pytest.approx(ok[default_key] / own)


def test_a_job_whose_best_is_the_default_reports_no_speedup_over_it(
    pool: LocalPool, database: Database
) -> None:
    summary = _run(database, pool, trials=1)  # the default is measured first
    (study,) = summary["studies"]
    with database.session(readonly=True) as s:
        (row,) = repository.studies_for_job(s, int(summary["job"]))
    default = default_config(get_spec("matmul"), row.device_class)
    assert config_key(study["best"]["config"]) == config_key(default)
    assert study["default_time_ms"] == study["best_trial_ms"]
    assert study["speedup_vs_default"] == 1.0 and study["speedup_vs_median"] == 1.0

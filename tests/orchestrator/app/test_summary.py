"""Honest speedups in a job's summary: the winner, the default config and the study's median
config timed side by side in the one final re-timing (replayed with noise, so a re-timing is
never a trial's time again); a job whose only config was the default is not re-timed and reports
1.00x; a study of a cancelled job has no speedups."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from db import Database, JobStatus, repository
from orchestrator.app.jobs import job_summary
from orchestrator.run.driver import Driver, submit_job
from orchestrator.run.jobs import JobSpec
from orchestrator.run.local_pool import LocalPool
from orchestrator.run.worker import PoolOptions, WorkerPlan
from search_spaces.registry import get_spec
from search_spaces.space import config_key
from tests.orchestrator.conftest import H200

SMALL = {"M": 256, "N": 256, "K": 256, "dtype": "float16"}


@pytest.fixture
def pool(landscapes: dict[str, list[Path]]) -> Iterator[LocalPool]:
    """One replay worker of the H200 landscapes whose every timing carries 5% noise."""
    plan = WorkerPlan("replay", tuple(str(p) for p in landscapes[H200]))
    local = LocalPool([plan], PoolOptions(replay_noise=0.05, replay_seed=3))
    yield local
    local.shutdown()


def _run(
    database: Database, pool: LocalPool, trials: int
) -> tuple[dict[str, Any], dict[str, float]]:
    """The job's one study in its summary, and its trials' times by config key."""
    spec = JobSpec.from_mapping({"kernel": "matmul", "problems": [SMALL], "trials": trials})
    result = Driver(database, pool, retime_rounds=3, poll_s=0.0).run(
        submit_job(database, spec, pool)
    )
    assert result.status is JobStatus.DONE
    summary = job_summary(database, result.job_id, winners=result.winners).to_dict()
    (study,) = summary["studies"]
    with database.session(readonly=True) as s:
        (row,) = repository.studies_for_job(s, result.job_id)
        trials_ms: dict[str, float] = {
            t.config_key: t.median_ms
            for t in repository.trials_for_study(s, row.id)
            if t.median_ms is not None
        }
    return study, trials_ms


def _default_as_measured(pool: LocalPool) -> dict[str, Any]:
    """The spec default's class representative on SMALL (GROUP_M 8 -> 4: two tile rows)."""
    spec = get_spec("matmul")
    default = spec.default_for(pool.workers()[0].limits)
    representative = spec.equivalence(SMALL)
    assert representative is not None and representative(default) != default
    return representative(default)


def test_speedups_come_from_one_retiming_of_winner_default_and_median(
    pool: LocalPool, database: Database
) -> None:
    study, trials_ms = _run(database, pool, trials=12)
    retimed = study["retimed"]
    assert retimed["retimed"] and retimed["promoted"]
    assert study["best"]["time_ms"] == retimed["time_ms"]
    assert study["speedup_vs_default"] == retimed["default_ms"] / retimed["time_ms"]
    assert study["speedup_vs_median"] == retimed["median_ms"] / retimed["time_ms"]
    default = _default_as_measured(pool)
    median_ms = statistics.median_low(trials_ms.values())
    # Re-timed, not read back from a trial: noise makes a fresh timing differ from the trial's.
    assert retimed["default_ms"] != trials_ms[config_key(default)]
    assert retimed["median_ms"] != median_ms
    assert retimed["time_ms"] not in trials_ms.values()


def test_a_job_whose_best_is_the_default_reports_no_speedup_over_it(
    pool: LocalPool, database: Database
) -> None:
    study, _ = _run(database, pool, trials=1)  # the default is measured first
    default = _default_as_measured(pool)
    assert config_key(study["best"]["config"]) == config_key(default)
    assert study["retimed"]["retimed"] is False  # one config: nothing to choose, not re-timed
    assert study["retimed"]["default_ms"] == study["retimed"]["time_ms"] == study["best"]["time_ms"]
    assert study["speedup_vs_default"] == 1.0 and study["speedup_vs_median"] == 1.0


def test_a_study_not_retimed_has_no_speedups(pool: LocalPool, database: Database) -> None:
    spec = JobSpec.from_mapping({"kernel": "matmul", "problems": [SMALL], "trials": 12})
    job_id = submit_job(database, spec, pool)

    def cancel_after_first() -> bool:
        with database.session() as s:
            if repository.outcome_counts(s, repository.studies_for_job(s, job_id)[0].id):
                repository.request_cancel(s, job_id)
        return False

    result = Driver(database, pool, poll_s=0.0, stop=cancel_after_first).run(job_id)
    assert result.status is JobStatus.CANCELLED
    summary = job_summary(database, job_id, winners=result.winners).to_dict()
    (study,) = summary["studies"]
    assert study["best"] is not None and study["retimed"]["retimed"] is False
    assert study["speedup_vs_default"] is None and study["speedup_vs_median"] is None

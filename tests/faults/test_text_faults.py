"""Text from a user's kernel cannot fail its job (issue 45 item 4): trials whose error message,
worker or host name hold a NUL byte or a lone surrogate are stored (escaped, db/text.py) beside
the good results of their batch, and the job ends ``done`` on both backends."""

from __future__ import annotations

from pathlib import Path

from db import Database, JobStatus, TrialOutcome, repository
from orchestrator.run.driver import Driver, submit_job
from orchestrator.run.jobs import JobSpec
from orchestrator.run.local_pool import LocalPool
from orchestrator.run.pool import Done
from orchestrator.run.worker import WorkerPlan
from tests.faults.checker import assert_held
from tests.faults.conftest import H200, MATMUL_SMALL, FaultPool
from workers.measurement import Measurement, Outcome

BAD = "kernel said \x00 and \ud800 then \udfff"
ESCAPED = "kernel said \\x00 and \\ud800 then \\udfff"


def unstorable(done: Done, n: int) -> Done:
    """Every third result: a compile error whose text a database would refuse as it is."""
    if n % 3:
        return done
    m = Measurement(Outcome.COMPILE_ERROR, error=BAD, worker="w\x00", host="h\ud800")
    return Done(done.request, done.tag, m, done.worker)


def test_a_kernel_s_nul_and_lone_surrogate_text_fails_no_trial_and_no_job(
    db: Database, landscapes: dict[str, list[Path]]
) -> None:
    budget = 9
    spec = JobSpec.from_mapping({"kernel": "matmul", "problems": [MATMUL_SMALL], "trials": budget})
    local = LocalPool([WorkerPlan("replay", tuple(str(p) for p in landscapes[H200]))])
    try:
        pool = FaultPool(local, unstorable)
        job_id = submit_job(db, spec, pool)
        result = Driver(db, pool, retime_rounds=1, poll_s=0.0).run(job_id)
    finally:
        local.shutdown()
    assert result.status is JobStatus.DONE
    with db.session(readonly=True) as s:
        assert repository.get_job(s, job_id).error is None
        trials = [
            t
            for study in repository.studies_for_job(s, job_id)
            for t in repository.trials_for_study(s, study.id)
        ]
    bad = [t for t in trials if t.outcome is TrialOutcome.COMPILE_ERROR]
    assert len(bad) == budget // 3
    assert {(t.error, t.worker, t.host) for t in bad} == {(ESCAPED, "w\\x00", "h\\ud800")}
    assert sum(t.outcome is TrialOutcome.OK for t in trials) >= budget - len(bad)
    assert assert_held(db, [job_id]).final == budget

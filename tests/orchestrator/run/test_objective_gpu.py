"""The graph objective end to end on a GPU: a graph job and a kernel job of one problem keep their
trials and best configs apart; a job's stored best times agree with its trials'."""

from __future__ import annotations

import ray

from db import Database, JobStatus, Objective, repository
from orchestrator.run.dispatch import PoolOptions, WorkerPool, ensure_ray, plans_for
from orchestrator.run.driver import Driver, submit_job
from orchestrator.run.jobs import JobSpec
from tests.gpu import needs_gpu

JOB = {"kernel": "rmsnorm", "problems": ["M=512,N=1024,dtype=float16"], "trials": 6}


def _run(database: Database, objective: Objective, job: dict[str, object] = JOB) -> int:
    spec = JobSpec.from_mapping({**job, "objective": objective.value, "sampler": "random"})
    options = PoolOptions(graph=objective is Objective.GRAPH)
    pool = WorkerPool(plans_for(spec.devices, options), options)
    try:
        job_id = submit_job(database, spec, pool)
        assert Driver(database, pool, retime_rounds=1).run(job_id).status is JobStatus.DONE
    finally:
        pool.shutdown()
    return job_id


@needs_gpu
def test_graph_and_kernel_jobs_keep_their_times_apart(database: Database) -> None:
    started = ensure_ray(None)
    try:
        graph_job = _run(database, Objective.GRAPH)
        kernel_job = _run(database, Objective.KERNEL)
    finally:
        if started:
            ray.shutdown()
    with database.session(readonly=True) as s:
        for job_id, objective in ((graph_job, Objective.GRAPH), (kernel_job, Objective.KERNEL)):
            (study,) = repository.studies_for_job(s, job_id)
            trials = repository.trials_for_study(s, study.id)
            # both jobs start from the spec default and ask with one seed, so their configs overlap:
            # the kernel job still reuses none of the graph job's trials
            assert len(trials) == 6 and not any(t.reused for t in trials)
            assert {t.objective for t in trials} == {objective}
        bests = repository.get_best(s, "rmsnorm", objective=None)
        assert sorted(b.objective.value for b in bests) == ["graph", "kernel"]


@needs_gpu
def test_best_times_of_a_many_problem_job_match_its_trials(database: Database) -> None:
    """The finish re-times every study's top configs on the one GPU: each best's time is within
    10% of its own trial's. Re-timed by six processes at once, they ran up to 1.75x slower."""
    problems = [f"M={m},N={n},dtype=bfloat16" for m in (8192, 16384) for n in (2048, 4096, 8192)]
    started = ensure_ray(None)
    try:
        job_id = _run(database, Objective.GRAPH, {**JOB, "problems": problems, "trials": 8})
    finally:
        if started:
            ray.shutdown()
    with database.session(readonly=True) as s:
        trials = {
            t.id: t
            for study in repository.studies_for_job(s, job_id)
            for t in repository.trials_for_study(s, study.id)
        }
        bests = repository.get_best(s, "rmsnorm", objective=Objective.GRAPH)
        assert len(bests) == len(problems)
        for best in bests:
            trial_ms = trials[best.trial_id].median_ms if best.trial_id in trials else None
            assert trial_ms is not None, best
            assert abs(best.time_ms / trial_ms - 1) < 0.10, (
                best.problem_key,
                best.time_ms,
                trial_ms,
            )

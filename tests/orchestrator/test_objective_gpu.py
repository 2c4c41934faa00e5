"""The graph objective end to end on a GPU: a graph job and a kernel job of one problem keep their
trials and best configs apart."""

from __future__ import annotations

import ray

from db import Database, JobStatus, Objective, repository
from orchestrator.dispatch import PoolOptions, WorkerPool, ensure_ray, plans_for
from orchestrator.driver import Driver, submit_job
from orchestrator.jobs import JobSpec
from tests.gpu import needs_gpu

JOB = {"kernel": "rmsnorm", "problems": ["M=512,N=1024,dtype=float16"], "trials": 6}


def _run(database: Database, objective: Objective) -> int:
    spec = JobSpec.from_mapping({**JOB, "objective": objective.value, "sampler": "random"})
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

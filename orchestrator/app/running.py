"""Running a job on this machine: a Ray worker pool for one job, its lease kept while a driver
runs it (``tunefleet tune``, ``run``/``resume``), and the pieces a server's scheduler shares
(:func:`pool_options`, :func:`drive`).

Ray loads when a job runs here, not at module import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from db.states import JobKind, JobStatus, Objective
from orchestrator.app.jobs import check_spec, job_summary, visible_job, write_job
from orchestrator.app.views import JobSummaryView
from orchestrator.errors import JobStateError, OrchestratorError, Terminated
from orchestrator.run.checks import check_local_workers, local_gpus
from orchestrator.run.jobs import JobSpec
from search_spaces.registry import spec_from_storage

if TYPE_CHECKING:
    from db import Database
    from orchestrator.run.dispatch import PoolOptions, WorkerPool
    from orchestrator.run.driver import JobResult
    from orchestrator.run.lease import LeaseKeeper
    from orchestrator.run.pool import Pool
    from orchestrator.run.progress import Reporter

#: Seconds a job's lease lives without renewal (the keeper renews it every third of that).
LEASE_S = 30.0


def cluster_address(ray_address: str | None) -> str:
    """The Ray cluster kept workers live on (``ray_address`` or RAY_ADDRESS); raises if none."""
    import os

    address = ray_address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise OrchestratorError(
            "kept workers need a running Ray cluster: start one with `ray start --head` and give "
            "--ray-address or RAY_ADDRESS (a local Ray ends with the command)"
        )
    return address


def pool_options(spec: JobSpec, keep: bool = False, base: PoolOptions | None = None) -> PoolOptions:
    """The worker pool settings a job asks for, on top of ``base`` (jobs with equal options can
    share a pool)."""
    from orchestrator.run.dispatch import PoolOptions

    return dataclasses.replace(
        base or PoolOptions(),
        in_flight=spec.in_flight,
        graph=spec.objective is Objective.GRAPH,
        keep=keep,
        compile_timeout_s=spec.compile_timeout_s,
        run_timeout_s=spec.run_timeout_s,
    )


@contextmanager
def _ray_pool(spec: JobSpec, ray_address: str | None, keep: bool) -> Iterator[WorkerPool]:
    """Workers for ``spec`` on Ray (started locally unless an address is given), for one job;
    a Ray connection made here is closed here (at once: Ray's own exit hook takes longer)."""
    import ray

    from orchestrator.run.dispatch import WorkerPool, ensure_ray, plans_for

    ours = not ray.is_initialized()
    ensure_ray(cluster_address(ray_address) if keep else ray_address)
    pool = None
    grace_s = 10.0
    try:
        options = pool_options(spec, keep)
        pool = WorkerPool(plans_for(spec.devices, options), options)
        yield pool
    except Terminated:
        grace_s = 0.0  # after a signal inside a blocking Ray call, Ray aborts on the next wait
        raise
    finally:
        if pool is not None:
            pool.shutdown(grace_s)
        if ours:
            ray.shutdown()


def drive(
    database: Database,
    pool: Pool,
    job_id: int,
    keeper: LeaseKeeper,
    reporter: Reporter | None = None,
    *,
    stop: Callable[[], bool] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> JobResult:
    """Run job ``job_id`` on ``pool`` under ``keeper``'s lease until done, cancelled, failed or
    stopped (``stop()`` True: the job is left ``queued`` for a new owner; or the lease lost:
    LeaseLost, the job left to the owner that took it over, untouched); the
    driver's result (its status, and the winners that give the summary's speedups).
    ``cancelled``: the cancel flag as the caller reads it (see :class:`Driver`)."""
    from orchestrator.run.driver import Driver

    def stopping() -> bool:
        return keeper.lost() or (stop is not None and bool(stop()))

    driver = Driver(
        database, pool, reporter=reporter, stop=stopping, cancelled=cancelled, lease=keeper.lease
    )
    return driver.run(job_id)


def _announce(reporter: Reporter, job_id: int, spec: JobSpec) -> None:
    timed = "" if spec.objective is Objective.KERNEL else ", objective graph (back to back)"
    reporter.note(
        f"job {job_id}: {spec.kernel}, {len(spec.problems)} problem(s){timed}; "
        f"cancel with `tunefleet cancel {job_id}`"
    )


def tune(
    database: Database,
    spec: JobSpec,
    *,
    ray_address: str | None = None,
    keep_workers: bool = False,
    reporter: Reporter | None = None,
    owner: str | None = None,
    priority: int = 0,
) -> JobSummaryView:
    """Submit ``spec`` and run it here, at once (``tunefleet tune``): the checks that need no
    cluster (orchestrator.run.checks) run before Ray starts, those that need it on its workers
    before the job row is written, which is written with our lease taken so that no scheduler
    claims it."""
    from db import repository
    from orchestrator.run.driver import plan_job
    from orchestrator.run.lease import LeaseKeeper, default_owner
    from orchestrator.run.progress import SilentReporter

    kernel = check_spec(spec)
    if keep_workers:
        cluster_address(ray_address)
    check_local_workers(spec, ray_address, local_gpus())
    owner = owner or default_owner()
    reporter = reporter or SilentReporter()
    with _ray_pool(spec, ray_address, keep_workers) as pool:
        plan_job(spec, kernel, pool)
        with database.session() as s:
            job_id = write_job(s, spec, kernel, priority)
            repository.acquire_lease(s, job_id, owner, LEASE_S)
        with LeaseKeeper(database, job_id, owner, LEASE_S) as keeper:
            _announce(reporter, job_id, spec)
            result = drive(database, pool, job_id, keeper, reporter)
    # The caller named this kernel: a module:attribute of theirs may be imported for the summary.
    modules = (spec.kernel,) if ":" in spec.kernel else ()
    return job_summary(database, job_id, modules, result.winners)


def _runnable(database: Database, job_id: int, kernel_modules: Collection[str]) -> JobSpec:
    """The job's spec if it can run here (not done); its kernel is imported only if registered
    or named in ``kernel_modules`` (a job row never makes us import code)."""
    with database.session(readonly=True) as s:
        job = visible_job(s, job_id, None)
    if job.kind is JobKind.REVALIDATE:
        raise JobStateError(
            f"job {job_id} is a revalidation job: a server's scheduler runs it, on workers of "
            "the stack it re-times"
        )
    if job.status is JobStatus.DONE:
        raise JobStateError(f"job {job_id} is already done; start a new job to tune more")
    spec_from_storage(str(job.spec.get("kernel", job.kernel_name)), kernel_modules)
    return JobSpec.from_mapping(job.spec)


def run_job(
    database: Database,
    job_id: int,
    *,
    ray_address: str | None = None,
    keep_workers: bool = False,
    reporter: Reporter | None = None,
    owner: str | None = None,
    kernel_modules: Collection[str] = (),
) -> JobSummaryView:
    """Take job ``job_id``'s lease (JobLeased if another live owner holds it; an expired lease
    is taken over), drive the job on Ray workers here, release the lease; its summary.
    ``kernel_modules``: the ``module:attribute`` kernels (or modules) the caller allows."""
    from orchestrator.run.lease import LeaseKeeper, default_owner
    from orchestrator.run.progress import SilentReporter

    spec = _runnable(database, job_id, kernel_modules)
    if keep_workers:
        cluster_address(ray_address)
    check_local_workers(spec, ray_address, local_gpus())
    reporter = reporter or SilentReporter()
    with (
        LeaseKeeper(database, job_id, owner or default_owner(), LEASE_S) as keeper,
        _ray_pool(spec, ray_address, keep_workers) as pool,
    ):
        _announce(reporter, job_id, spec)
        result = drive(database, pool, job_id, keeper, reporter)
    return job_summary(database, job_id, kernel_modules, result.winners)


#: Resuming is running an existing job again: it rebuilds its studies from the trial rows.
resume_job = run_job


__all__ = [
    "LEASE_S",
    "cluster_address",
    "drive",
    "pool_options",
    "resume_job",
    "run_job",
    "tune",
]

"""The scheduler of ``tunefleet serve``: claims queued jobs from the database and runs them.

One background thread claims jobs under a lease (``repository.claim_next_job``: priority, then
age; a running job whose lease expired, on the database's clock, is taken over and resumed from
its trial rows) and starts each in a thread of its own that drives it with the same driver as
``tunefleet tune``. Its owner id is unique per process (``lease.default_owner``), and every write
it or a driver makes for a job is fenced on the job's lease (owner and epoch): a scheduler that
was frozen past its leases and woke after another took its jobs over writes nothing more to
them (LeaseLost) and lets them go.

Workers: the scheduler's ``--device`` sources become Ray worker actors, grouped into one pool per
device class (per accelerator type for ``auto``, one per replay file, one for the interpreter) and
pool options. A job runs on the pools of the classes it asks for, which stay up between jobs.
Up to ``jobs_per_class`` jobs share a class's pool at once, its slots split fair by team, then by
job (orchestrator.server.shared_pool); a job with other pool options (e.g. ``in_flight``) waits
until the class is idle and gets its pool restarted with them. A poll claims jobs while they land
on idle classes and stops at the first that joins a busy one (or has to wait), so that several
schedulers serving one class take turns at the queue and its jobs spread over their pools.

``stop()`` (the SIGTERM path) stops claiming, tells every driver to stop through its ``stop`` hook
(the trials in flight are waited for and recorded; the job goes back to ``queued``), releases every
lease and the workers (a driver that has not stopped within the timeout keeps its pool, and its
job's lease expires with the process). A job the scheduler held when it died is taken over by any
scheduler once its lease expires; a scheduler given the same explicit ``owner`` resumes it at once
(taking the lease raises its epoch, fencing out any other holder of that owner id). On SQLite one
scheduler serves a database file (a file lock beside it): a second one raises SchedulerConflict.

Revalidation: each cycle, before claiming, the scheduler looks at the stacks (driver, runtime,
Triton, torch) its live workers report; a stack it has not seen yet (a worker joined, a pool
restarted after an upgrade), and every stack once per ``recheck_s``, goes to
:func:`orchestrator.run.stack_watch.watch`, which queues revalidation jobs under the operator's
:class:`~orchestrator.run.stack_watch.RevalidationPolicy`. So a worker of a new Triton version
leads to a revalidation job of its class's stored bests that is claimed in the same cycle. Such
a job runs like a tuning job (lease, fencing, cancel) on the groups whose workers have that
stack (:func:`orchestrator.run.revalidation_job.run_revalidation`).

Health: a lost worker actor is replaced by its pool (orchestrator.run.healing); the claiming thread
also takes on the replacements of idle pools. :meth:`Scheduler.health` says why the scheduler
cannot run jobs now (its workers did not start, its thread ended, a class has no live worker).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from db import Database, JobKind, JobStatus, Objective, repository
from db.errors import DatabaseError, LeaseLost
from orchestrator.app.jobs import mark_cancelled
from orchestrator.app.running import drive, pool_options
from orchestrator.app.views import DeviceClassView
from orchestrator.errors import JobSpecError, NoWorkersError, OrchestratorError, SchedulerConflict
from orchestrator.run.jobs import DeviceSource, JobSpec, SourceKind
from orchestrator.run.lease import LeaseKeeper, default_owner
from orchestrator.run.revalidation_job import RevalidationSpec, run_revalidation
from orchestrator.run.stack_watch import RevalidationPolicy, stack_of, watch
from orchestrator.server.shared_pool import JobView, SharedPool
from search_spaces.device_identity import same_class
from search_spaces.errors import SpecError
from search_spaces.registry import spec_from_storage
from workers.errors import WorkerError

if TYPE_CHECKING:
    from orchestrator.run.dispatch import PoolOptions, WorkerPlan, WorkerPool
    from orchestrator.run.pool import Done, Pool, RetimeJob, WorkerInfo
    from workers.trial import TrialRequest

log = logging.getLogger("tunefleet.scheduler")

#: Errors that fail a job with their one-line message (anything else is logged with its trace).
JOB_ERRORS = (OrchestratorError, SpecError, WorkerError, DatabaseError)


class PoolSet:
    """The pools of several device classes seen as one pool by a driver (``submit`` and the
    other per-class calls go to the class's pool; ``wait`` collects from all). ``shutdown`` does
    nothing: the scheduler owns the pools and keeps them for the next job."""

    def __init__(self, pools: Sequence[Pool]) -> None:
        self._pools = list(pools)

    def _of(self, class_key: str) -> Pool:
        for pool in self._pools:
            if class_key in pool.classes():
                return pool
        raise NoWorkersError(f"no live worker of class {class_key!r} is left")

    def classes(self) -> dict[str, WorkerInfo]:
        return {k: v for pool in self._pools for k, v in pool.classes().items()}

    def workers(self, class_key: str | None = None) -> list[WorkerInfo]:
        return [w for pool in self._pools for w in pool.workers(class_key)]

    def free_slots(self, class_key: str) -> int:
        return sum(pool.free_slots(class_key) for pool in self._pools)

    @property
    def in_flight(self) -> int:
        return sum(pool.in_flight for pool in self._pools)

    def submit(self, class_key: str, request: TrialRequest, tag: object) -> WorkerInfo:
        return self._of(class_key).submit(class_key, request, tag)

    def wait(self, timeout: float) -> list[Done]:
        busy = [pool for pool in self._pools if pool.in_flight] or self._pools[:1]
        out: list[Done] = []
        for pool in busy:
            out.extend(pool.wait(timeout / len(busy)))
        return out

    def retime(
        self, jobs: Sequence[RetimeJob], rounds: int, timeout_s: float = 600.0
    ) -> list[list[list[float]] | None]:
        out: list[list[list[float]] | None] = [None] * len(jobs)
        for pool in self._pools:
            mine = [i for i, job in enumerate(jobs) if job[0] in pool.classes()]
            if mine:
                medians = pool.retime([jobs[i] for i in mine], rounds, timeout_s)
                for i, found in zip(mine, medians, strict=True):
                    out[i] = found
        return out

    def shutdown(self, grace_s: float = 10.0) -> None:
        return None


@dataclass
class _Group:
    """Worker plans that measure one device class; its pool (started with ``options``) if up."""

    source: str
    plans: list[WorkerPlan]
    classes: set[str] = field(default_factory=set)
    pool: WorkerPool | None = None
    options: PoolOptions | None = None
    shared: SharedPool | None = None  # ``pool`` as the running jobs share it
    jobs: set[int] = field(default_factory=set)  # the jobs that use the group now
    wanted: PoolOptions | None = None  # the options of those jobs
    starting: threading.Lock = field(default_factory=threading.Lock)  # (re)starting ``pool``


@dataclass
class _Job:
    """A claimed job: its lease keeper and, once started, its thread and groups."""

    id: int
    keeper: LeaseKeeper
    groups: list[_Group] = field(default_factory=list)
    thread: threading.Thread | None = None
    team: str | None = None
    kind: JobKind = JobKind.TUNE


def _group_key(plan: WorkerPlan) -> tuple[Any, ...]:
    return (plan.backend, plan.replay_paths, tuple(sorted(plan.resources.items())))


class Scheduler:
    """Claims and runs queued jobs; see the module doc."""

    def __init__(
        self,
        database: Database,
        *,
        ray_address: str | None = None,
        devices: Sequence[DeviceSource] = (DeviceSource(SourceKind.AUTO),),
        owner: str | None = None,
        lease_s: float = 30.0,
        poll_s: float = 1.0,
        pool_options: PoolOptions | None = None,
        kernel_modules: Collection[str] = (),
        jobs_per_class: int = 8,
        max_jobs: int | None = None,
        revalidation: RevalidationPolicy | None = None,
        recheck_s: float = 300.0,
    ) -> None:
        """``pool_options``: the base settings of every pool (a job's ``in_flight`` and
        objective override theirs). ``kernel_modules``: the modules whose ``module:attribute``
        kernels jobs may name (the server's allow-list); a job row naming another is failed
        without importing anything. ``jobs_per_class``: jobs that share a class's pool at once.
        ``max_jobs``: jobs this scheduler holds at once (None: no bound); the rest stay queued
        for other schedulers, since every driver of a server shares one interpreter.
        ``revalidation``: when to queue revalidation jobs (None: the default policy, on stack
        change); ``recheck_s``: how often every live stack is looked at again (a new one is at
        once)."""
        if jobs_per_class < 1:
            raise OrchestratorError("jobs_per_class must be at least 1")
        if max_jobs is not None and max_jobs < 1:
            raise OrchestratorError("max_jobs must be at least 1")
        if not devices:
            raise OrchestratorError("the scheduler needs at least one --device source")
        self.database = database
        self.ray_address = ray_address
        self.devices = tuple(devices)
        self.owner = owner or default_owner()
        self.lease_s = lease_s
        self.poll_s = poll_s
        self._base = pool_options
        self.kernel_modules = frozenset(kernel_modules)
        self.jobs_per_class = jobs_per_class
        self.max_jobs = max_jobs
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._groups: list[_Group] = []
        self._claimed: dict[int, _Job] = {}
        self._cancels: frozenset[int] = frozenset()  # running jobs with a cancel asked for
        self._thread: threading.Thread | None = None
        self._lock_fd: int | None = None
        self._started_ray = False
        self.error: str | None = None
        self.revalidation = revalidation or RevalidationPolicy()
        self.recheck_s = recheck_s
        self._stacks: dict[tuple[str, tuple[str, ...]], float] = {}  # stack -> when last watched
        #: Claiming cycles run so far (a stack seen in cycle n has its jobs claimed in cycle n).
        self.cycles = 0

    # ----- life cycle
    def start(self) -> None:
        """Take the SQLite file lock (SchedulerConflict if another scheduler holds it), connect
        to Ray, and start the claiming thread (which first starts the workers)."""
        if self._thread is not None:
            raise OrchestratorError("the scheduler is already started")
        self._lock_file()
        import ray

        from orchestrator.run.dispatch import ensure_ray

        try:
            self._started_ray = ensure_ray(self.ray_address)
            # Ray builds its serialization context (which imports pydantic's compat modules) on
            # first use: here, in the caller's thread, not in ours racing a web server's imports.
            # (Only once connected: ``put`` would start a Ray of its own where pools need none.)
            if ray.is_initialized():
                ray.put(None)
        except BaseException:
            self._unlock_file()
            raise
        self._thread = threading.Thread(target=self._main, name="scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop claiming, stop every driver through its ``stop`` hook (trials in flight are
        recorded, the jobs go back to ``queued``), release every lease, the workers and Ray
        (if this scheduler started it). Waits up to ``timeout_s`` in all for the claiming
        thread and the drivers (every driver sees the stop at once; they are waited for
        together, against one deadline)."""
        deadline = time.monotonic() + timeout_s
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            jobs = list(self._claimed.values())
        for job in jobs:
            if job.thread is not None:
                job.thread.join(max(0.0, deadline - time.monotonic()))
        alive: set[int] = set()
        for job in jobs:
            if job.thread is not None and job.thread.is_alive():
                alive.add(job.id)
                log.warning("job %d: its driver did not stop within %g s", job.id, timeout_s)
        with self._lock:
            waiting = [job for job in self._claimed.values() if job.thread is None]
            groups = list(self._groups)
        for job in waiting:  # claimed, never started (``_release`` takes the lock itself)
            self._release(job)
        for group in groups:
            # A driver still running keeps its pool (its trials would fail the job): the job's
            # lease expires with this process and another scheduler resumes it.
            if group.pool is not None and not group.jobs & alive:
                group.pool.shutdown()
                group.pool = None
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False
        self._unlock_file()

    def _lock_file(self) -> None:
        if self.database.backend != "sqlite":
            return
        name = self.database.engine.url.database
        if not name or name == ":memory:":
            return
        path = Path(f"{name}.scheduler.lock")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise OrchestratorError(
                f"cannot create the scheduler's lock file {path}: {exc.strerror or exc}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 100).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise SchedulerConflict(
                f"another scheduler ({holder}) already serves the SQLite file {name} (lock "
                f"{path}); stop it, start this server with --no-scheduler, or use PostgreSQL "
                "for several schedulers"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, owner {self.owner}\n".encode())
        self._lock_fd = fd

    def _unlock_file(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the lock
            self._lock_fd = None

    # ----- what it serves
    def status(self) -> dict[str, Any]:
        """``owner``, ``running`` and ``waiting`` (claimed, waiting for their classes) job ids,
        ``queued`` (jobs in the database nobody runs), ``stopping``, ``error`` (why the workers
        did not start, if they did not)."""
        with self._lock:
            running = sorted(j.id for j in self._claimed.values() if j.thread is not None)
            waiting = sorted(j.id for j in self._claimed.values() if j.thread is None)
        with self.database.session(readonly=True) as s:
            queued = repository.count_jobs(s, status=JobStatus.QUEUED)
        return {
            "owner": self.owner,
            "running": running,
            "waiting": waiting,
            "queued": queued,
            "stopping": self._stopping.is_set(),
            "error": self.error,
        }

    def health(self) -> list[str]:
        """Why this scheduler cannot run jobs now, one line each naming no path ([]: it can):
        its workers did not start, its claiming thread ended, or a device class it serves has no
        live worker (a replacement is on its way or waits for its backoff)."""
        reasons = []
        if self.error is not None:
            reasons.append("the scheduler's workers did not start (the server log has why)")
        elif (
            self._thread is not None and not self._thread.is_alive() and not self._stopping.is_set()
        ):
            reasons.append("the scheduler's claiming thread ended; restart the server")
        with self._lock:
            pools = [g.pool for g in self._groups if g.pool is not None]
        for pool in pools:
            reasons.extend(pool.health())
        return reasons

    def problem(self) -> str | None:
        """:meth:`health`'s reasons in one line, or None while the scheduler can run jobs."""
        return "; ".join(self.health()) or None

    def device_classes(self) -> list[DeviceClassView]:
        """Each class the workers measure: live workers, how many a job uses now, idle ones."""
        counts: dict[str, list[int]] = {}
        with self._lock:
            for group in self._groups:
                live = group.pool.workers() if group.pool is not None else []
                for cls in sorted(group.classes):
                    n = sum(1 for w in live if w.class_key == cls)
                    entry = counts.setdefault(cls, [0, 0])
                    entry[0] += n
                    entry[1] += n if group.jobs else 0
        return [DeviceClassView(k, w, b, w - b) for k, (w, b) in sorted(counts.items())]

    # ----- the claiming thread
    def _main(self) -> None:
        try:
            self._start_groups()
        except JOB_ERRORS as exc:
            self.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.error("scheduler: the workers did not start: %s", exc)
            return
        except Exception as exc:
            self.error = f"unexpected {type(exc).__name__}"
            log.exception("scheduler: the workers did not start")
            return
        try:
            with self.database.session(readonly=True) as s:
                mine = repository.jobs_leased_by(s, self.owner)
        except DatabaseError as exc:
            log.warning("scheduler: cannot list the jobs it owned: %s", exc)
            mine = []
        for job_id in mine:
            self._take(job_id)
        while not self._stopping.is_set():
            self._heal_idle()
            try:
                self._watch_stacks()
                self._read_cancels()
                self._step()
            except DatabaseError as exc:
                log.warning("scheduler: %s", exc)
            self.cycles += 1
            self._wake.wait(self.poll_s)
            self._wake.clear()

    def _start_groups(self) -> None:
        """One pool per device class group, started with the base options (their classes are
        what jobs are matched against)."""
        from orchestrator.run.dispatch import PoolOptions, WorkerPool, plans_for

        base = self._base or PoolOptions()
        for source in self.devices:
            grouped: dict[tuple[Any, ...], list[WorkerPlan]] = {}
            for plan in plans_for([source], base):
                grouped.setdefault(_group_key(plan), []).append(plan)
            for plans in grouped.values():
                pool = WorkerPool(plans, base)
                group = _Group(str(source), plans, set(pool.classes()), pool, base)
                with self._lock:
                    self._groups.append(group)
        log.info(
            "scheduler %s: workers of %s",
            self.owner,
            ", ".join(sorted({c for g in self._groups for c in g.classes})),
        )

    def _heal_idle(self) -> None:
        """Take on the started replacements of lost workers in the pools no job uses now (a
        pool in use heals in its drivers' ``wait``)."""
        with self._lock:
            idle = [g.pool for g in self._groups if g.pool is not None and not g.jobs]
        for pool in idle:
            pool.heal()

    def _watch_stacks(self) -> None:
        """Hand each live worker stack that is new here, or last watched ``recheck_s`` ago, to
        :func:`~orchestrator.run.stack_watch.watch` (which marks it and queues revalidation
        jobs as the policy says)."""
        with self._lock:
            pools = [g.pool for g in self._groups if g.pool is not None]
        now = time.monotonic()
        for pool in pools:
            for worker in pool.workers():
                fp = worker.fingerprint
                key = (fp.device_class.key, tuple(stack_of(fp).values()))
                seen = self._stacks.get(key)
                if seen is not None and now - seen < self.recheck_s:
                    continue
                self._stacks[key] = now
                try:
                    watch(
                        self.database,
                        fp,
                        self.revalidation,
                        owner=self.owner,
                        kernel_modules=self.kernel_modules,
                    )
                except JOB_ERRORS as exc:
                    log.warning("scheduler: revalidation of %s not scheduled: %s", key[0], exc)

    def _take(self, job_id: int) -> bool:
        """Hold job ``job_id``'s lease from now on (False if another owner has it)."""
        keeper = LeaseKeeper(self.database, job_id, self.owner, self.lease_s)
        try:
            keeper.__enter__()
        except JOB_ERRORS as exc:
            log.warning("job %d: not taken: %s", job_id, exc)
            return False
        with self._lock:
            self._claimed[job_id] = _Job(job_id, keeper)
        return True

    def _read_cancels(self) -> None:
        """Read the cancel flags of the running jobs, in one query (in a write transaction, so
        that it also checks the database takes writes, as a driver's own poll does); their
        drivers read the set instead of polling one query each (those polls were 8.5% of a server's
        Python time in a fleet simulation of many short jobs)."""
        with self._lock:
            running = [j.id for j in self._claimed.values() if j.thread is not None]
        self._cancels = frozenset(
            self.database.run_with_retry(lambda s: repository.cancels_requested(s, running))
        )

    def _step(self) -> None:
        """Start the claimed jobs whose classes can take them; claim more (see the bounds)."""
        self._start_ready()
        while not self._stopping.is_set():
            with self._lock:
                held = len(self._claimed)
                waiting = sum(1 for j in self._claimed.values() if j.thread is None)
            # Up to one waiting job per class group: a job that waits for a busy class does not
            # keep a job of an idle class from being claimed, and few jobs are held from others.
            if waiting >= len(self._groups) or (
                self.max_jobs is not None and held >= self.max_jobs
            ):
                return
            with self.database.session() as s:
                job_id = repository.claim_next_job(s, self.owner, self.lease_s)
            if job_id is None or not self._take(job_id):
                return
            # Claim on while jobs land on idle classes; one that joins jobs already running (or
            # waits) ends this poll's claims, so that other schedulers serving the class get
            # their turn at the queue (and its jobs spread over their pools).
            if not self._start_ready():
                return

    def _start_ready(self) -> bool:
        """Start the waiting jobs that can run now; True if one started on idle groups only."""
        with self._lock:
            waiting = sorted(
                (j for j in self._claimed.values() if j.thread is None), key=lambda j: j.id
            )
        fresh = False
        for job in waiting:
            if self._stopping.is_set():
                return fresh
            try:
                found = self._groups_for(job)
            except JOB_ERRORS as exc:
                self._fail(job, str(exc))
                continue
            if found is None:  # cancelled before it ran, or its lease is lost
                continue
            groups, options = found
            with self._lock:
                if any(
                    len(g.jobs) >= self.jobs_per_class or (g.jobs and g.wanted != options)
                    for g in groups
                ):
                    continue
                fresh = fresh or not any(g.jobs for g in groups)
                for g in groups:
                    g.jobs.add(job.id)
                    g.wanted = options
                job.groups = groups
                job.thread = threading.Thread(
                    target=self._run, args=(job,), name=f"job-{job.id}", daemon=True
                )
            job.thread.start()
        return fresh

    def _groups_for(self, job: _Job) -> tuple[list[_Group], PoolOptions] | None:
        """The groups ``job`` runs on and its pool options; None (and the job let go) if it
        was cancelled while it waited or its lease was lost. Raises JobSpecError /
        NoWorkersError when this scheduler's workers cannot run it."""
        if job.keeper.lost():
            self._release(job)
            return None
        with self.database.session() as s:
            record = repository.get_job(s, job.id)
            cancelled = record.cancel_requested
            if cancelled:
                repository.check_lease(s, job.keeper.lease)
                mark_cancelled(s, job.id)
        if cancelled:
            self._release(job)
            return None
        job.team = record.team
        job.kind = record.kind
        if record.kind is JobKind.REVALIDATE:
            again = RevalidationSpec.from_mapping(record.spec)
            return self._stack_groups(again), self._revalidation_options(again.objective)
        spec = self._spec(record.spec)
        return self._match(spec), pool_options(spec, base=self._base)

    def _stack_groups(self, spec: RevalidationSpec) -> list[_Group]:
        """The groups with a live worker of the job's class and stack (NoWorkersError: none)."""
        wanted = tuple(
            spec.environment.get(k, "") for k in ("triton", "torch", "driver", "runtime")
        )
        with self._lock:
            groups = list(self._groups)
        found = [
            g
            for g in groups
            if g.pool is not None
            and any(
                w.class_key == spec.device_class
                and tuple(stack_of(w.fingerprint).values()) == wanted
                for w in g.pool.workers()
            )
        ]
        if not found:
            raise NoWorkersError(
                f"no live worker of {spec.device_class} with the stack to revalidate "
                f"({', '.join(f'{k} {v}' for k, v in spec.environment.items() if v)})"
            )
        return found

    def _revalidation_options(self, objective: Objective) -> PoolOptions:
        """A revalidation job's pool options: a default tuning job's (so they share a pool)."""
        import dataclasses

        from orchestrator.run.dispatch import PoolOptions

        return dataclasses.replace(
            self._base or PoolOptions(),
            in_flight=None,
            graph=objective is Objective.GRAPH,
            keep=False,
            compile_timeout_s=JobSpec.compile_timeout_s,
            run_timeout_s=JobSpec.run_timeout_s,
        )

    def _spec(self, stored: Mapping[str, Any]) -> JobSpec:
        """The job spec of a job row; a ``module:attribute`` kernel only from an allowed module
        (RegistryError before anything is imported)."""
        spec_from_storage(str(stored.get("kernel", "")), self.kernel_modules)
        return JobSpec.from_mapping(stored)

    def _match(self, spec: JobSpec) -> list[_Group]:
        groups = list(self._groups)
        if spec.devices != (DeviceSource(SourceKind.AUTO),):
            served = {str(d) for d in self.devices}
            asked = [str(d) for d in spec.devices]
            missing = [d for d in asked if d not in served]
            if missing:
                raise JobSpecError(
                    f"this server has no workers for device {missing[0]}; it serves "
                    f"{', '.join(sorted(served))} (resume the job where its devices are)"
                )
            groups = [g for g in groups if g.source in asked]
        if spec.all_classes:
            return groups
        chosen: list[_Group] = []
        present = sorted({c for g in groups for c in g.classes})
        for wanted in spec.device_classes:
            found = [g for g in groups if any(same_class(wanted, c) for c in g.classes)]
            if not found:
                raise NoWorkersError(
                    f"no worker of device class {wanted!r}; classes present: {', '.join(present)}"
                )
            chosen.extend(g for g in found if g not in chosen)
        return chosen

    # ----- one job's thread
    def _view(self, group: _Group, options: PoolOptions, job: _Job) -> JobView:
        """``job``'s view of ``group``'s pool with ``options``: the running one, or one
        (re)started with them (only when no other job uses the group: see ``_start_ready``)."""
        from orchestrator.run.dispatch import WorkerPool

        with group.starting:
            if group.pool is None or group.options != options:
                if group.pool is not None:
                    group.pool.shutdown()
                    group.pool = None
                group.pool, group.options = WorkerPool(group.plans, options), options
                group.shared = None
            if group.shared is None:
                group.shared = SharedPool(group.pool)
            return group.shared.view(job.id, job.team)

    def _run(self, job: _Job) -> None:
        views: list[JobView] = []
        try:
            with self.database.session(readonly=True) as s:
                stored = repository.get_job(s, job.id).spec
            if job.kind is JobKind.REVALIDATE:
                objective = RevalidationSpec.from_mapping(stored).objective
                options = self._revalidation_options(objective)
            else:
                spec = self._spec(stored)
                options = pool_options(spec, base=self._base)
            for g in job.groups:
                views.append(self._view(g, options, job))
            if job.kind is JobKind.REVALIDATE:
                status = run_revalidation(
                    self.database,
                    PoolSet(views),
                    job.id,
                    job.keeper.lease,
                    stop=lambda: job.keeper.lost() or self._stopping.is_set(),
                    cancelled=lambda: job.id in self._cancels,
                    kernel_modules=self.kernel_modules,
                )
            else:
                status = drive(
                    self.database,
                    PoolSet(views),
                    job.id,
                    job.keeper,
                    stop=self._stopping.is_set,
                    cancelled=lambda: job.id in self._cancels,
                ).status
            log.info("job %d: %s", job.id, status.value)
        except LeaseLost as exc:
            log.warning("job %d: left to its new owner: %s", job.id, exc)
        except JOB_ERRORS as exc:
            self._fail(job, str(exc).splitlines()[0] if str(exc) else repr(exc))
        except Exception as exc:
            log.exception("job %d: the scheduler failed running it", job.id)
            self._fail(job, f"scheduler error: {exc!r}"[:500])
        finally:
            for view in views:
                view.shared.leave(view)
            with self._lock:
                for g in job.groups:
                    g.jobs.discard(job.id)
            self._release(job)
            self._wake.set()

    def _fail(self, job: _Job, error: str) -> None:
        """Mark ``job`` failed with ``error`` unless its driver ended it already or its lease is
        no longer ours; let it go."""
        log.warning("job %d: failed: %s", job.id, error)
        try:
            with self.database.session() as s:
                repository.check_lease(s, job.keeper.lease)
                record = repository.get_job(s, job.id)
                if record.status in (JobStatus.QUEUED, JobStatus.RUNNING):
                    if record.status is JobStatus.QUEUED:
                        repository.set_job_status(s, job.id, JobStatus.RUNNING)
                    repository.set_job_status(s, job.id, JobStatus.FAILED, error)
        except LeaseLost as exc:
            log.warning("job %d: its failure is not recorded: %s", job.id, exc)
        except DatabaseError as exc:
            log.warning("job %d: cannot record its failure: %s", job.id, exc)
        if job.thread is None:
            self._release(job)

    def _release(self, job: _Job) -> None:
        with self._lock:
            if self._claimed.pop(job.id, None) is None:
                return
        try:
            job.keeper.__exit__(None, None, None)
        except DatabaseError as exc:
            log.warning("job %d: its lease was not released (it expires): %s", job.id, exc)

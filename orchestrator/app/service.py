"""The application layer: tunefleet's use cases as functions that return plain data.

The CLI renders these views and the HTTP API serializes them (``to_dict()`` is the wire format,
``from_dict()`` reads it back in the client). Views are frozen dataclasses of JSON-ready values:
datetimes leave as ISO 8601 strings, enums as their values.

Job views read only what the job row and its trial rows store, so they work where the job's
kernel module is not importable; running a job, best configs and bundles need the kernel spec.
Nothing here imports torch, triton or Ray at module import: running a job imports Ray then;
the database layer (SQLAlchemy) loads on the first use that needs it, so the kernel and space
views start fast.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import types
import zipfile
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar, Union, get_args, get_origin, get_type_hints

from db.states import JobKind, JobStatus, Objective, StudyStatus, TrialOutcome
from orchestrator.app.study_best import BestSource, StudyBest, rows_by_key, study_best
from orchestrator.errors import (
    Conflict,
    InvalidRequest,
    JobSpecError,
    JobStateError,
    NotFound,
    OrchestratorError,
    Terminated,
)
from orchestrator.run.checks import check_local_workers, check_memory, local_gpus
from orchestrator.run.jobs import ALL_CLASSES, JobSpec
from orchestrator.run.speedup import speedup
from search_spaces.device_identity import DeviceClass, DeviceIdentityError, canonical_key
from search_spaces.errors import SpecError
from search_spaces.problem import problem_key
from search_spaces.registry import all_specs, get_spec, spec_from_storage
from search_spaces.space import DeviceLimits
from search_spaces.spec import KernelSpec
from workers.device_table import find, lookup

if TYPE_CHECKING:
    from db import Database, Session
    from db.repository import BestRecord, JobRecord, StudyRecord
    from orchestrator.run.dispatch import PoolOptions, WorkerPool
    from orchestrator.run.driver import JobResult
    from orchestrator.run.lease import LeaseKeeper
    from orchestrator.run.pool import Pool
    from orchestrator.run.progress import Reporter
    from orchestrator.run.promotion import Winners

#: Seconds a job's lease lives without renewal (the keeper renews it every third of that).
LEASE_S = 30.0
#: Most items one listing page holds.
MAX_LIMIT = 500

_V = TypeVar("_V", bound="View")


# ----------------------------------------------------------------------------- views


def _dump(value: Any) -> Any:
    if isinstance(value, View):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return _aware(value).isoformat()
    if isinstance(value, tuple | list):
        return [_dump(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _dump(v) for k, v in value.items()}
    return value


def _load(hint: Any, value: Any) -> Any:
    origin, args = get_origin(hint), get_args(hint)
    if value is None:
        return None
    if origin in (Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return _load(inner, value)
    if origin is tuple:
        return tuple(_load(args[0], v) for v in value)
    if origin is dict or hint is Any:
        return value
    if hint is datetime:
        return datetime.fromisoformat(value)
    if hint is float:
        return float(value)
    if isinstance(hint, type) and issubclass(hint, View):
        return hint.from_dict(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    return value


class View:
    """Base of the frozen view dataclasses: ``to_dict()`` (JSON-ready) and ``from_dict()``."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _dump(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[_V], data: Mapping[str, Any]) -> _V:
        """The view ``to_dict()`` made (unknown keys are ignored, missing ones raise KeyError)."""
        hints = get_type_hints(cls)
        values = {
            f.name: _load(hints[f.name], data[f.name])
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.name in data or f.default is dataclasses.MISSING  # a newer field: its default
        }
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class JobView(View):
    """One job as listings show it; ``trials_done`` of ``trials_budget`` counts every study's
    trials that are not ``infra`` (reused ones too), ``best_ms`` is the fastest of its studies'
    bests (each as :func:`orchestrator.app.study_best.study_best` decides: a decided key's
    re-timed winner, else the fastest ``ok`` trial so far)."""

    id: int
    kernel: str
    kernel_version: str
    status: JobStatus
    team: str | None
    priority: int
    problems: tuple[dict[str, Any], ...]
    classes: tuple[str, ...]
    objective: Objective
    sampler: str
    trials_done: int
    trials_budget: int
    best_ms: float | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    cancel_requested: bool
    #: ``tune``, or ``revalidate`` for a job a server scheduled after a stack change.
    kind: str = "tune"


@dataclasses.dataclass(frozen=True)
class StudyProgress(View):
    """One study of a job: ``done`` of ``budget`` trials, trials by outcome, and its best as
    :func:`orchestrator.app.study_best.study_best` decides it for every view: ``best_source``
    ``decided`` (the key's best row: ``best_ms`` its re-timed winner's time, ``best_job`` the job
    that wrote it, ``cancelled_job`` if that job was cancelled, which backend holds the key and
    the speedups over the default config and the vendor path, times of one re-timing; None: not
    measured) or ``so_far`` (the fastest ``ok`` trial of a study that still runs or whose key no
    row decides: not re-timed, no speedups); None: no ``ok`` trial yet."""

    id: int
    label: str
    problem: dict[str, Any]
    device_class: str
    status: StudyStatus
    budget: int
    done: int
    outcomes: dict[str, int]
    measured: int
    reused: int
    best_ms: float | None
    best_config: dict[str, Any] | None
    backend: str | None = None
    vendor: str | None = None
    speedup_vs_default: float | None = None
    speedup_vs_vendor: float | None = None
    best_source: BestSource | None = None
    best_job: int | None = None
    cancelled_job: bool = False
    triton_ms: float | None = None
    vendor_ms: float | None = None
    default_ms: float | None = None
    noise: float | None = None


@dataclasses.dataclass(frozen=True)
class JobDetail(View):
    """A job with per-study progress; on the wire the job's fields plus ``studies``."""

    job: JobView
    studies: tuple[StudyProgress, ...]

    def to_dict(self) -> dict[str, Any]:
        return {**self.job.to_dict(), "studies": [s.to_dict() for s in self.studies]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobDetail:
        return cls(
            JobView.from_dict(data), tuple(StudyProgress.from_dict(s) for s in data["studies"])
        )

    @property
    def finished(self) -> bool:
        return self.job.status in FINISHED


@dataclasses.dataclass(frozen=True)
class JobPage(View):
    """One page of a job listing, newest first; ``total`` matches the filters (``before``
    aside); ``next_before``: the ``before`` of the next page, None on the last."""

    items: tuple[JobView, ...]
    total: int
    limit: int
    offset: int
    before: int | None = None
    next_before: int | None = None


@dataclasses.dataclass(frozen=True)
class TrialView(View):
    """One trial row of a study."""

    id: int
    config: dict[str, Any]
    outcome: TrialOutcome
    median_ms: float | None
    iqr_ms: float | None
    max_rel_error: float | None
    compile_s: float | None
    error: str | None
    worker: str | None
    reused: bool
    created_at: datetime


@dataclasses.dataclass(frozen=True)
class TrialPage(View):
    """One page of a study's trials, ordered by ``sort`` (``orchestrator.app.insights.trial_page``)."""

    study_id: int
    items: tuple[TrialView, ...]
    total: int
    limit: int
    offset: int
    sort: str


@dataclasses.dataclass(frozen=True)
class BestView(View):
    """A stored best config with its rates and its provenance (the team and job that made it;
    ``cancelled_job``: that job was cancelled, so its config is its fastest trial so far, not
    re-timed, until a ``resume`` finishes the job)."""

    kernel: str
    kernel_version: str
    problem: dict[str, Any]
    device_class: str
    triton: str
    objective: Objective
    config: dict[str, Any]
    time_ms: float
    tflops: float | None
    gbs: float | None
    roofline_pct: float | None
    team: str | None
    job_id: int | None
    updated_at: datetime
    #: The last ``tunefleet revalidate`` of it (state, at, ms, ratio); None: never, or tuned since.
    revalidation: dict[str, Any] | None = None
    cancelled_job: bool = False
    #: Which backend holds the key (``triton``: ``config``; ``vendor``: the path ``vendor``,
    #: ``time_ms`` its time), the vendor path's and the default config's times in the re-timing
    #: that decided it, and its relative noise floor (None: not measured).
    backend: str = "triton"
    vendor: str | None = None
    vendor_ms: float | None = None
    default_ms: float | None = None
    noise: float | None = None

    @property
    def speedup_vs_default(self) -> float | None:
        return speedup(self.default_ms, self.time_ms)

    @property
    def speedup_vs_vendor(self) -> float | None:
        return speedup(self.vendor_ms, self.time_ms)

    def to_dict(self) -> dict[str, Any]:
        """The fields, and the two speedups (read back from the times by ``from_dict``)."""
        return {
            **super().to_dict(),
            "speedup_vs_default": self.speedup_vs_default,
            "speedup_vs_vendor": self.speedup_vs_vendor,
        }


@dataclasses.dataclass(frozen=True)
class BundleFile:
    """A file ``pull`` writes: its name (no folder part), bytes and media type."""

    filename: str
    content: bytes
    media_type: str


@dataclasses.dataclass(frozen=True)
class KernelView(View):
    """A kernel that can be tuned: its problem schema (and usage line) and an example problem."""

    name: str
    description: str
    problem: tuple[dict[str, Any], ...]
    usage: str
    example: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class SpaceView(View):
    """A kernel's space on a device class: parameters present there, rules, default, counts."""

    kernel: str
    device_class: str
    parameters: dict[str, Any]
    constraints: tuple[dict[str, Any], ...]
    default: dict[str, Any]
    total: int
    valid: int
    space_hash: str
    version: str


@dataclasses.dataclass(frozen=True)
class JobSummaryView(View):
    """A job's results as ``orchestrator.app.summary.collect`` gives them; ``to_dict()`` is that
    summary (best config per study, rates, speedups, trials by outcome)."""

    job_id: int
    status: JobStatus
    summary: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.summary)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSummaryView:
        return cls(int(data["job"]), JobStatus(data["status"]), dict(data))


@dataclasses.dataclass(frozen=True)
class DeviceClassView(View):
    """A device class a scheduler's workers measure: how many workers, how many run a job."""

    key: str
    workers: int
    busy: int
    idle: int


FINISHED: frozenset[JobStatus] = frozenset({JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED})


# ----------------------------------------------------------------------------- helpers


def _aware(at: datetime) -> datetime:
    """``at`` with its time zone (SQLite returns naive datetimes; every stored time is UTC)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def _page(limit: int, offset: int) -> None:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    if offset < 0:
        raise InvalidRequest(f"offset must be 0 or more, got {offset}")


def no_job(job_id: int) -> NotFound:
    """The one error for a job that is missing and for one of another team: the same words, so
    that a team cannot tell another's job ids from unused ones."""
    return NotFound(f"no job {job_id} of yours; list jobs with `tunefleet jobs`")


def visible_job(s: Session, job_id: int, team: str | None) -> JobRecord:
    """The job, if it exists and (``team`` given) belongs to that team; else :func:`no_job`."""
    from db import repository
    from db.errors import NotFound as RecordNotFound

    try:
        job = repository.get_job(s, job_id)
    except RecordNotFound:
        raise no_job(job_id) from None
    if team is not None and job.team != team:
        raise no_job(job_id)
    return job


@dataclasses.dataclass
class _Counts:
    """Trial counts of one study: by outcome, reused, fastest ``ok`` median."""

    outcomes: dict[str, int] = dataclasses.field(default_factory=dict)
    reused: int = 0
    best_ms: float | None = None

    @property
    def counted(self) -> int:
        return sum(n for outcome, n in self.outcomes.items() if outcome != TrialOutcome.INFRA.value)


def _study_counts(s: Session, job_ids: Sequence[int]) -> dict[int, dict[int, _Counts]]:
    """job id -> study id -> its counts, in one query over the (not provisional) trial rows."""
    from db import repository

    rows = repository.study_trial_counts(s, job_ids)
    out: dict[int, dict[int, _Counts]] = {}
    for job_id, study_id, outcome, reused, count, fastest in rows:
        counts = out.setdefault(job_id, {}).setdefault(study_id, _Counts())
        if outcome is None:  # a study with no trial yet
            continue
        counts.outcomes[outcome.value] = counts.outcomes.get(outcome.value, 0) + count
        counts.reused += count if reused else 0
        if outcome is TrialOutcome.OK and fastest is not None:
            counts.best_ms = fastest if counts.best_ms is None else min(counts.best_ms, fastest)
    return out


def _decided_rows(
    s: Session, jobs: Sequence[JobRecord]
) -> dict[int, dict[tuple[str, str], BestRecord]]:
    """Per job id, the best rows of its kernel version and objective by key (the job's own row
    preferred), read once per kernel version."""
    from db import repository

    read: dict[tuple[str, str, Objective], list[BestRecord]] = {}
    out = {}
    for job in jobs:
        version = (job.kernel_name, job.kernel_version, job.objective)
        if version not in read:
            read[version] = repository.get_best(
                s, job.kernel_name, kernel_version=job.kernel_version, objective=job.objective
            )
        out[job.id] = rows_by_key(read[version], job.id)
    return out


def _job_bests(
    s: Session, jobs: Sequence[JobRecord], counts: Mapping[int, Mapping[int, _Counts]]
) -> dict[int, list[StudyBest | None]]:
    """Per job id, its studies' bests (configs and cancel marks left out: a listing's need)."""
    from db import repository

    rows = _decided_rows(s, jobs)
    out: dict[int, list[StudyBest | None]] = {job.id: [] for job in jobs}
    for study in repository.studies_for_jobs(s, list(out)):
        row = rows[study.job_id].get((study.problem_key, study.device_class.key))
        fastest = counts.get(study.job_id, {}).get(study.id, _Counts()).best_ms
        out[study.job_id].append(study_best(study.status, row, fastest))
    return out


def _budget(job: JobRecord) -> int:
    trials = job.spec.get("trials", 30)
    return int(trials) if isinstance(trials, int) else 30


def _job_view(
    job: JobRecord, studies: Mapping[int, _Counts], bests: Sequence[StudyBest | None] = ()
) -> JobView:
    """``job`` with its studies' counts and ``bests`` (each study's, see :mod:`study_best`)."""
    spec = job.spec
    classes = tuple(str(c) for c in spec.get("device_classes", [ALL_CLASSES]))
    problems = tuple(dict(p) for p in spec.get("problems", []))
    budget = _budget(job)
    # Before the driver plans the studies, count one per (problem, class named in the spec).
    planned = len(studies) or len(problems) * (1 if classes == (ALL_CLASSES,) else len(classes))
    times = [b.time_ms for b in bests if b is not None]
    return JobView(
        id=job.id,
        kernel=job.kernel_name,
        kernel_version=job.kernel_version,
        status=job.status,
        team=job.team,
        priority=job.priority,
        problems=problems,
        classes=classes,
        objective=job.objective,
        sampler=str(spec.get("sampler", "")),
        trials_done=sum(min(c.counted, budget) for c in studies.values()),
        trials_budget=budget * planned,
        best_ms=min(times) if times else None,
        created_at=_aware(job.created_at),
        started_at=_aware(job.started_at) if job.started_at else None,
        finished_at=_aware(job.finished_at) if job.finished_at else None,
        error=job.error,
        cancel_requested=job.cancel_requested,
        kind=job.kind.value,
    )


# ----------------------------------------------------------------------------- jobs


def check_spec(spec: JobSpec) -> KernelSpec:
    """The checks that need no cluster: the kernel is registered, its space has a valid config
    and its problems fit the memory of every device class the spec names that the device table
    knows. Raises JobSpecError."""
    try:
        kernel = spec.kernel_spec()
    except SpecError as exc:
        raise JobSpecError(str(exc)) from None
    if not spec.all_classes:
        for name in spec.device_classes:
            known = find(DeviceClass.parse(name).name)
            if known is not None and kernel.space.count(known.limits) == 0:
                raise JobSpecError(
                    f"the {kernel.name} space has no valid config on {known.name}; "
                    "check the space's constraints against this device"
                )
    check_memory(spec, kernel)
    return kernel


def _write_job(s: Session, spec: JobSpec, kernel: KernelSpec, priority: int) -> int:
    from db import repository

    kernel_id = repository.ensure_kernel(s, kernel.name, kernel.version_hash(), kernel.space.hash())
    return repository.create_job(s, kernel_id, spec.to_dict(), spec.team, priority=priority)


def submit_job(database: Database, spec: JobSpec, *, priority: int = 0) -> int:
    """Check ``spec`` (see check_spec) and write it as a ``queued`` job; return its id. Nothing
    runs it here: a scheduler claims it, or ``run_job`` runs it in this process."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise JobSpecError(f"priority must be an integer, got {priority!r}")
    kernel = check_spec(spec)
    with database.session() as s:
        return _write_job(s, spec, kernel, priority)


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
            job_id = _write_job(s, spec, kernel, priority)
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


def job_summary(
    database: Database,
    job_id: int,
    kernel_modules: Collection[str] = (),
    winners: Winners | None = None,
) -> JobSummaryView:
    """The job's results (needs the job's kernel spec, loaded as ``run_job`` does: rates);
    ``winners``, what the run's final re-timing measured, give its speedups."""
    from orchestrator.app.summary import collect

    summary = collect(database, job_id, kernel_modules, winners)
    return JobSummaryView(job_id, JobStatus(summary["status"]), summary)


def mark_cancelled(s: Session, job_id: int) -> None:
    """Cancel job ``job_id`` now, with its running studies (for a job no driver runs); each
    study's fastest ``ok`` trial is promoted (orchestrator.run.promotion)."""
    from db import repository
    from orchestrator.run.promotion import promote_stored

    for study in repository.studies_for_job(s, job_id):
        if study.status is StudyStatus.RUNNING:
            repository.set_study_status(s, study.id, StudyStatus.CANCELLED)
    repository.set_job_status(s, job_id, JobStatus.CANCELLED)
    promote_stored(s, job_id)


def cancel_job(database: Database, job_id: int, *, team: str | None = None) -> JobView:
    """Cancel job ``job_id`` (``team`` given: only that team's). A job nobody runs (no live
    lease: queued, or its driver died) is cancelled at once; a running one is asked to stop and
    its driver keeps every finished trial. Conflict if the job already finished."""
    from db import repository
    from db.errors import InvalidTransition

    with database.session() as s:
        visible_job(s, job_id, team)
        try:
            repository.request_cancel(s, job_id)  # locks the row until this session ends
        except InvalidTransition as exc:
            raise Conflict(str(exc)) from None
        if not repository.lease_live(s, job_id):  # on the database's clock
            mark_cancelled(s, job_id)
        job = repository.get_job(s, job_id)
        counts = _study_counts(s, [job_id])
        bests = _job_bests(s, [job], counts)
    return _job_view(job, counts.get(job_id, {}), bests[job_id])


def requeue_job(database: Database, job_id: int, *, team: str | None = None) -> JobDetail:
    """Hand job ``job_id`` (``team`` given: only that team's) back to the schedulers: a failed
    or cancelled job, or a running one whose lease expired (its driver died), goes back to
    ``queued`` (its error and any cancel request cleared); a scheduler claims it and its driver
    rebuilds the studies from the trial rows, up to the job's budget. A queued job nobody holds
    is left as it is. Conflict for a done job and for one whose lease is live (it runs)."""
    from db import repository
    from db.errors import InvalidTransition

    with database.session() as s:
        job = visible_job(s, job_id, team)
        if job.status is JobStatus.DONE:
            raise Conflict(f"job {job_id} is already done; submit a new job to tune more")
        if job.status is not JobStatus.QUEUED or repository.lease_live(s, job_id):
            try:  # running locks the row: the lease is read again under the lock
                repository.set_job_status(s, job_id, JobStatus.RUNNING)
            except InvalidTransition as exc:  # it finished meanwhile
                raise Conflict(str(exc)) from None
            if repository.lease_live(s, job_id):
                raise Conflict(
                    f"job {job_id} is running (its lease is live); follow it with "
                    f"`tunefleet job {job_id} --watch` or cancel it first"
                )
            repository.set_job_status(s, job_id, JobStatus.QUEUED)
    return job_detail(database, job_id, team=team)


def list_jobs(
    database: Database,
    *,
    team: str | None = None,
    status: JobStatus | str | None = None,
    kernel: str | None = None,
    limit: int = 50,
    offset: int = 0,
    before: int | None = None,
) -> JobPage:
    """The jobs matching every filter given (``before``: ids below it), newest first, ``limit``
    from ``offset``."""
    from db import repository

    _page(limit, offset)
    if before is not None and before < 1:
        raise InvalidRequest(f"before must be a job id (1 or more), got {before}")
    chosen = None
    if status is not None:
        try:
            chosen = JobStatus(status)
        except ValueError:
            raise InvalidRequest(
                f"unknown status {status!r}; one of {', '.join(s.value for s in JobStatus)}"
            ) from None
    filters: dict[str, Any] = {"team": team, "status": chosen, "kernel": kernel}
    with database.session(readonly=True) as s:
        records = repository.list_jobs(s, **filters, limit=limit + 1, offset=offset, before=before)
        more, records = len(records) > limit, records[:limit]
        total = repository.count_jobs(s, **filters)
        counts = _study_counts(s, [r.id for r in records]) if records else {}
        bests = _job_bests(s, records, counts)
    items = tuple(_job_view(r, counts.get(r.id, {}), bests[r.id]) for r in records)
    return JobPage(items, total, limit, offset, before, items[-1].id if more else None)


def _label(study: StudyRecord) -> str:
    dims = ",".join(f"{k}={v}" for k, v in study.problem.items())
    return f"{dims} @ {study.device_class.key}"


def job_detail(database: Database, job_id: int, *, team: str | None = None) -> JobDetail:
    """The job with each study's progress: trials by outcome, budget, and its best (a decided
    key's re-timed winner, else the fastest trial so far: :mod:`orchestrator.app.study_best`)."""
    from db import repository

    with database.session(readonly=True) as s:
        job = visible_job(s, job_id, team)
        studies = repository.studies_for_job(s, job_id)
        counts = _study_counts(s, [job_id]).get(job_id, {})
        budget = _budget(job)
        decided = _decided_rows(s, [job])[job_id]
        cancelled = _cancelled_jobs(s, {r.job_id for r in decided.values() if r.job_id})
        progress = []
        bests = []
        for study in studies:
            c = counts.get(study.id, _Counts())
            fastest_config = None
            if c.best_ms is not None:
                fastest_config = repository.config_timed(s, study.id, c.best_ms)
            row = decided.get((study.problem_key, study.device_class.key))
            best = study_best(study.status, row, c.best_ms, fastest_config, cancelled)
            bests.append(best)
            progress.append(
                StudyProgress(
                    id=study.id,
                    label=_label(study),
                    problem=dict(study.problem),
                    device_class=study.device_class.key,
                    status=study.status,
                    budget=budget,
                    done=min(c.counted, budget),
                    outcomes=dict(sorted(c.outcomes.items())),
                    measured=c.counted - c.reused,
                    reused=c.reused,
                    best_ms=best.time_ms if best else None,
                    best_config=best.config if best else None,
                    backend=best.backend if best else None,
                    vendor=best.vendor if best else None,
                    speedup_vs_default=best.speedup_vs_default if best else None,
                    speedup_vs_vendor=best.speedup_vs_vendor if best else None,
                    best_source=best.source if best else None,
                    best_job=best.job_id if best else None,
                    cancelled_job=best.cancelled_job if best else False,
                    triton_ms=best.triton_ms if best else None,
                    vendor_ms=best.vendor_ms if best else None,
                    default_ms=best.default_ms if best else None,
                    noise=best.noise if best else None,
                )
            )
    return JobDetail(_job_view(job, counts, bests), tuple(progress))


def _kernel(name: str) -> KernelSpec:
    try:
        return get_spec(name)
    except SpecError as exc:
        raise NotFound(str(exc)) from None


def best_configs(
    database: Database,
    *,
    kernel: str,
    device_class: str | None = None,
    objective: Objective | str = Objective.KERNEL,
    problem: str | Mapping[str, Any] | None = None,
) -> list[BestView]:
    """Best stored configs of the installed version of ``kernel`` for ``objective``, optionally
    of one device class and one problem (``M=64,...`` or a mapping), in key order."""
    from db import repository
    from orchestrator.app.rates import rates
    from orchestrator.run.revalidate import revalidation_mark

    spec = _kernel(kernel)
    try:
        chosen = Objective(objective)
    except ValueError:
        raise InvalidRequest(f"unknown objective {objective!r}; choose kernel or graph") from None
    key = None
    if problem is not None:
        parsed = (
            spec.parse_problem(problem)
            if isinstance(problem, str)
            else spec.validate_problem(problem)
        )
        key = problem_key(parsed)
    class_key = _class_key(device_class) if device_class else None
    version = spec.version_hash()
    with database.session(readonly=True) as s:
        records = repository.get_best(s, spec.name, key, class_key, version, objective=chosen)
        cancelled = _cancelled_jobs(s, {r.job_id for r in records if r.job_id is not None})
    out = []
    for r in records:
        problem_dict = json.loads(r.problem_key)
        known = find(r.device_class_key)
        rated = rates(spec, problem_dict, r.time_ms, known.name if known else r.device_class_key)
        out.append(
            BestView(
                kernel=r.kernel_name,
                kernel_version=r.kernel_version,
                problem=dict(problem_dict),
                device_class=r.device_class_key,
                triton=r.triton_minor,
                objective=r.objective,
                config=dict(r.config),
                time_ms=r.time_ms,
                tflops=rated.tflops,
                gbs=rated.gbs,
                roofline_pct=rated.roofline_pct,
                team=r.team,
                job_id=r.job_id,
                updated_at=_aware(r.updated_at),
                revalidation=revalidation_mark(r),
                cancelled_job=r.job_id in cancelled,
                backend=r.backend.value,
                vendor=r.vendor,
                vendor_ms=r.vendor_ms,
                default_ms=r.default_ms,
                noise=r.noise,
            )
        )
    return out


def _class_key(device_class: str) -> str:
    """The key results of ``device_class`` (a key, name or alias) are stored under;
    InvalidRequest for text that cannot name a class."""
    try:
        return canonical_key(device_class)
    except DeviceIdentityError as exc:
        raise InvalidRequest(str(exc)) from None


def _cancelled_jobs(s: Session, job_ids: Collection[int]) -> set[int]:
    """Which of ``job_ids`` are cancelled jobs (a best config's provenance mark)."""
    from db import repository

    return repository.cancelled_jobs(s, job_ids)


MEDIA_TYPES = {".json": "application/json", ".py": "text/x-python"}


def bundle_files(
    database: Database,
    kernel: str,
    *,
    device_classes: Sequence[str] = (),
    objective: Objective | str = Objective.KERNEL,
    fmt: str = "native",
) -> list[BundleFile]:
    """The files ``pull`` writes for ``kernel`` (see orchestrator.export.bundle), in order."""
    from orchestrator.export.bundle import BundleFormat, render

    try:
        chosen = BundleFormat(fmt)
    except ValueError:
        raise InvalidRequest(f"unknown format {fmt!r}; use native, triton or vllm") from None
    try:
        objective = Objective(objective)
    except ValueError:
        raise InvalidRequest(f"unknown objective {objective!r}; choose kernel or graph") from None
    _kernel(kernel)
    classes = [_class_key(c) for c in device_classes]
    return [
        BundleFile(name, text.encode(), MEDIA_TYPES.get(name[name.rfind(".") :], "text/plain"))
        for name, text in render(database, kernel, classes, chosen, objective)
    ]


def build_bundle(
    database: Database,
    kernel: str,
    *,
    device_class: str | None = None,
    objective: Objective | str = Objective.KERNEL,
    fmt: str = "native",
) -> BundleFile:
    """What ``pull`` writes as one download: the file itself when there is one, else a zip
    archive of them (named ``<kernel>-<format>.zip``)."""
    files = bundle_files(
        database,
        kernel,
        device_classes=[device_class] if device_class else [],
        objective=objective,
        fmt=fmt,
    )
    if len(files) == 1:
        return files[0]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for f in files:
            archive.writestr(f.filename, f.content)
    return BundleFile(f"{_kernel(kernel).name}-{fmt}.zip", buffer.getvalue(), "application/zip")


# ----------------------------------------------------------------------------- kernels


def list_kernels() -> list[KernelView]:
    """The kernels that can be tuned (built-in and registered through entry points)."""
    return [
        KernelView(
            name=s.name,
            description=s.description,
            problem=tuple(s.schema.describe()),
            usage=s.schema.usage(),
            example=dict(s.example),
        )
        for s in all_specs()
    ]


def _limits_for(device_class: str | None) -> tuple[str, DeviceLimits]:
    if device_class is None:
        from workers.device import detect

        fingerprint = detect("auto")[0]
        return fingerprint.device_class.key, fingerprint.limits()
    known = lookup(device_class)
    return known.name, known.limits


def kernel_space(name: str, device_class: str | None = None) -> SpaceView:
    """``name``'s space on a known device class (None: this machine's first device)."""
    spec = _kernel(name)
    class_key, limits = _limits_for(device_class)
    described = spec.space.describe()
    present = {p.name for p in spec.space.params_for(limits.vendor)}
    parameters: Mapping[str, Any] = described["parameters"]  # type: ignore[assignment]
    constraints: Sequence[dict[str, Any]] = described["constraints"]  # type: ignore[assignment]
    return SpaceView(
        kernel=spec.name,
        device_class=class_key,
        parameters={k: v for k, v in parameters.items() if k in present},
        constraints=tuple(constraints),
        default=spec.default_for(limits),
        total=spec.space.total(limits.vendor),
        valid=spec.space.count(limits),
        space_hash=spec.space.hash(),
        version=spec.version_hash(),
    )


__all__ = [
    "FINISHED",
    "BestView",
    "BundleFile",
    "DeviceClassView",
    "JobDetail",
    "JobPage",
    "JobSummaryView",
    "JobView",
    "KernelView",
    "SpaceView",
    "StudyProgress",
    "TrialPage",
    "TrialView",
    "View",
    "best_configs",
    "build_bundle",
    "bundle_files",
    "cancel_job",
    "check_spec",
    "cluster_address",
    "job_detail",
    "job_summary",
    "kernel_space",
    "list_jobs",
    "list_kernels",
    "mark_cancelled",
    "pool_options",
    "requeue_job",
    "resume_job",
    "run_job",
    "submit_job",
    "tune",
]

"""The job use cases: check and submit a spec, list jobs, a job's detail and summary, cancel and
requeue.

Job views read only what the job row and its trial rows store, so they work where the job's
kernel module is not importable (a summary needs the kernel spec: rates). The database layer
(SQLAlchemy) loads on the first use that needs it; nothing here imports torch, triton or Ray.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from db.states import JobStatus, Objective, StudyStatus, TrialOutcome
from orchestrator.app.results import cancelled_jobs
from orchestrator.app.study_best import StudyBest, rows_by_key, study_best
from orchestrator.app.views import (
    JobDetail,
    JobPage,
    JobSummaryView,
    JobView,
    StudyProgress,
    aware,
)
from orchestrator.errors import Conflict, InvalidRequest, JobSpecError, NotFound
from orchestrator.run.checks import check_memory
from orchestrator.run.jobs import ALL_CLASSES, JobSpec
from search_spaces.device_identity import DeviceClass
from search_spaces.errors import SpecError
from search_spaces.spec import KernelSpec
from workers.device_table import find

if TYPE_CHECKING:
    from db import Database, Session
    from db.repository import BestRecord, JobRecord, StudyRecord
    from orchestrator.run.promotion import Winners

#: Most items one listing page holds.
MAX_LIMIT = 500


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
        created_at=aware(job.created_at),
        started_at=aware(job.started_at) if job.started_at else None,
        finished_at=aware(job.finished_at) if job.finished_at else None,
        error=job.error,
        cancel_requested=job.cancel_requested,
        kind=job.kind.value,
    )


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


def write_job(s: Session, spec: JobSpec, kernel: KernelSpec, priority: int) -> int:
    """Write ``spec`` (checked: ``kernel`` is its spec) as a ``queued`` job; its id."""
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
        return write_job(s, spec, kernel, priority)


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
        cancelled = cancelled_jobs(s, {r.job_id for r in decided.values() if r.job_id})
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


__all__ = [
    "MAX_LIMIT",
    "cancel_job",
    "check_spec",
    "job_detail",
    "job_summary",
    "list_jobs",
    "mark_cancelled",
    "no_job",
    "requeue_job",
    "submit_job",
    "visible_job",
    "write_job",
]

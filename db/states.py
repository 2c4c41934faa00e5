"""The states and kinds the database stores, as enums (no SQLAlchemy: cheap to import, so the
CLI can name them in its options without loading the ORM). ``db.models`` re-exports them."""

from __future__ import annotations

import enum


class JobStatus(str, enum.Enum):
    """Lifecycle of a job; the allowed moves are in :data:`JOB_TRANSITIONS`."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset({JobStatus.RUNNING, JobStatus.CANCELLED}),
    # running -> running: a driver resuming a job whose previous driver died.
    # running -> queued: a driver told to stop (its lease lost, a scheduler shutting down)
    # hands the job back for a new owner to resume.
    JobStatus.RUNNING: frozenset(
        {JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED}
    ),
    JobStatus.DONE: frozenset(),
    JobStatus.FAILED: frozenset({JobStatus.RUNNING}),
    JobStatus.CANCELLED: frozenset({JobStatus.RUNNING}),
}


class JobKind(str, enum.Enum):
    """What a job does: ``tune`` (search configs) or ``revalidate`` (re-time stored bests in
    a new environment, scheduled by a server when a worker's stack changed or on a schedule)."""

    TUNE = "tune"
    REVALIDATE = "revalidate"


class StudyStatus(str, enum.Enum):
    """State of one (job, problem, device class) search."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class TrialOutcome(str, enum.Enum):
    """How a trial ended; the same values as ``workers.measurement.Outcome`` (db imports none of ours)."""

    OK = "ok"
    INVALID = "invalid"
    WRONG = "wrong"
    COMPILE_ERROR = "compile_error"
    COMPILE_TIMEOUT = "compile_timeout"
    RUN_TIMEOUT = "run_timeout"
    CRASH = "crash"
    INFRA = "infra"


#: Outcomes that may not be the config's fault (a process killed from outside, a timeout on a loaded
#: node): a trial may store one as ``provisional``, re-measured once before a verdict stands.
RETRYABLE_OUTCOMES = frozenset(
    {TrialOutcome.CRASH, TrialOutcome.COMPILE_TIMEOUT, TrialOutcome.RUN_TIMEOUT}
)


class TokenScope(str, enum.Enum):
    """What an API token may do; each scope includes the ones before it."""

    READ = "read"
    SUBMIT = "submit"
    ADMIN = "admin"


class Objective(str, enum.Enum):
    """What a trial's time means. Times of different objectives are never compared or mixed."""

    KERNEL = "kernel"  # one launch alone: events around it, L2 flushed before it
    GRAPH = "graph"  # per launch, in a CUDA graph of back-to-back launches over rotating inputs


class BestBackend(str, enum.Enum):
    """Which backend won a best-config key: ``triton`` (the stored config) or ``vendor`` (the
    spec's library path named beside it)."""

    TRITON = "triton"
    VENDOR = "vendor"


class RevalidationState(str, enum.Enum):
    """What re-timing a stored best config in a later environment found (``tunefleet
    revalidate``): ``holds`` within the threshold of its stored time, ``regressed`` slower by
    more, ``failed`` it no longer runs correctly (any outcome but ok)."""

    HOLDS = "holds"
    REGRESSED = "regressed"
    FAILED = "failed"


#: States that mean a stored best no longer stands: its bundle entry is flagged, and a re-tuned
#: config replaces it when faster than the re-timed one (not the stale stored time).
STALE_STATES = frozenset({RevalidationState.REGRESSED, RevalidationState.FAILED})

"""A revalidation job: re-time stored best configs on the workers of a new stack, under a lease.

A server's scheduler writes one (:mod:`orchestrator.run.stack_watch`) when a worker reports an
environment the stored bests of its class were not measured in, or when their last check is
older than the operator's ``--revalidate-every``; it claims and runs it like a tuning job (same
lease, same fencing, shown in ``jobs``, cancellable, audited). Per stored best it re-times, in a
fresh process, paired and interleaved: the stored config, the next fastest ``ok`` configs of
its key (up to ``top_k`` in all) and the spec's vendor paths, and gives the stored config the
verdict ``tunefleet revalidate`` gives (holds / regressed / failed). Each verdict is marked on
the best row and appended to its drift history in one fenced transaction; a resumed job skips
the rows it already timed. With ``retune`` (the team's policy) a finished job that found
regressed or failed rows queues a tuning job of those problems for the same team.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from db import JobKind, JobStatus, Objective
from db.errors import NotFound
from db.states import STALE_STATES
from orchestrator.errors import JobSpecError
from orchestrator.run.jobs import JobSpec
from orchestrator.run.pool import Candidate, Pool, VendorPath
from orchestrator.run.revalidate import DEFAULT_THRESHOLD, changes_line, judge
from search_spaces.bundle_env import ENV_FIELDS, differences
from search_spaces.registry import spec_from_storage
from search_spaces.space import config_key

if TYPE_CHECKING:
    from db import BestRecord, Database, Lease, Session

#: Rounds of the paired re-timing of one key (each candidate's time is the median of these).
ROUNDS = 3


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise JobSpecError(f"a revalidation job's {name} must be a non-empty string")
    return value


@dataclass(frozen=True)
class RevalidationSpec:
    """What a revalidation job re-times: the stored bests ``best_ids`` of ``kernel`` on
    ``device_class`` (``problems``: theirs, for listings), on workers whose stack is
    ``environment`` (triton, torch, driver, runtime); ``reason`` says why it was scheduled;
    ``retune``: queue a tuning job of the stale problems afterwards (the team's policy)."""

    kernel: str
    device_class: str
    environment: dict[str, str]
    best_ids: tuple[int, ...]
    problems: tuple[dict[str, Any], ...]
    reason: str
    objective: Objective = Objective.KERNEL
    team: str | None = None
    threshold: float = DEFAULT_THRESHOLD
    retune: bool = False
    top_k: int = 3
    rounds: int = ROUNDS
    changed: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """The job row's spec; job listings read ``kernel``, ``problems``, ``device_classes``,
        ``trials`` (the rows to re-time) and ``objective`` from it as from a tuning spec."""
        return {
            "kind": JobKind.REVALIDATE.value,
            "kernel": self.kernel,
            "device_classes": [self.device_class],
            "environment": dict(self.environment),
            "best_ids": list(self.best_ids),
            "problems": [dict(p) for p in self.problems],
            "trials": len(self.best_ids),
            "reason": self.reason,
            "objective": self.objective.value,
            "team": self.team,
            "threshold": self.threshold,
            "retune": self.retune,
            "top_k": self.top_k,
            "rounds": self.rounds,
            "changed": list(self.changed),
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RevalidationSpec:
        """Read :meth:`to_dict`'s output back; JobSpecError (one line) on a malformed row."""
        if data.get("kind") != JobKind.REVALIDATE.value:
            raise JobSpecError("not a revalidation job's spec")
        classes = data.get("device_classes")
        if not isinstance(classes, list) or len(classes) != 1:
            raise JobSpecError("a revalidation job names exactly one device class")
        env = data.get("environment")
        if not isinstance(env, Mapping):
            raise JobSpecError("a revalidation job names the environment it re-times in")
        ids = data.get("best_ids")
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):
            raise JobSpecError("a revalidation job's best_ids must be a list of row ids")
        threshold = data.get("threshold", DEFAULT_THRESHOLD)
        if not isinstance(threshold, int | float) or not math.isfinite(threshold) or threshold < 1:
            raise JobSpecError(f"threshold must be a number of at least 1, got {threshold!r}")
        try:
            objective = Objective(str(data.get("objective", "kernel")))
        except ValueError:
            raise JobSpecError(f"unknown objective {data.get('objective')!r}") from None
        team = data.get("team")
        return cls(
            kernel=_text(data.get("kernel"), "kernel"),
            device_class=_text(classes[0], "device class"),
            environment={k: str(env.get(k) or "") for k in ENV_FIELDS},
            best_ids=tuple(ids),
            problems=tuple(dict(p) for p in data.get("problems") or () if isinstance(p, Mapping)),
            reason=str(data.get("reason", "")),
            objective=objective,
            team=team if isinstance(team, str) else None,
            threshold=float(threshold),
            retune=bool(data.get("retune", False)),
            top_k=max(1, int(data.get("top_k", 3))),
            rounds=max(1, int(data.get("rounds", ROUNDS))),
            changed=tuple(str(c) for c in data.get("changed") or ()),
        )


def _environment_of(s: Session, best: BestRecord) -> dict[str, str]:
    from db import repository

    if best.environment_id is None:
        return {}
    env = repository.get_environment(s, best.environment_id)
    return {
        "triton": env.triton_version,
        "torch": env.torch_version,
        "driver": env.driver,
        "runtime": env.runtime,
    }


@dataclass(frozen=True)
class _Key:
    """One stored best to re-time: its row, problem, the candidates and what changed."""

    best: BestRecord
    problem: dict[str, Any]
    candidates: list[Candidate]
    changed: list[str]


def _candidates(
    s: Session, spec: RevalidationSpec, best: BestRecord, kernel_id: int, allowed: Collection[str]
) -> _Key:
    """The stored config first, then the next fastest ``ok`` configs of its key (``top_k`` in
    all), then the spec's vendor paths on this problem (a ``module:attribute`` kernel loads only
    from ``allowed``)."""
    import json

    from db import repository

    problem = json.loads(best.problem_key)
    configs: list[Candidate] = [dict(best.config)]
    seen = {config_key(best.config)}
    cls = repository.device_class_by_key(s, spec.device_class)
    if cls is not None:
        measured = repository.measured_for_key(
            s, kernel_id, best.problem_key, cls.id, spec.objective
        )
        ranked = sorted(
            (m for m in measured if m.outcome.value == "ok" and m.median_ms is not None),
            key=lambda m: m.median_ms or math.inf,
        )
        for m in ranked:
            if len(configs) >= spec.top_k:
                break
            if m.config_key not in seen:
                seen.add(m.config_key)
                configs.append(dict(m.config))
    kernel = spec_from_storage(spec.kernel, allowed)
    try:
        vendors = kernel.vendor_paths(kernel.validate_problem(problem))
    except Exception:  # a problem the installed spec no longer takes: no vendor path to time
        vendors = ()
    configs.extend(VendorPath(name) for name in vendors)
    changed = differences(_environment_of(s, best), spec.environment)
    return _Key(best, problem, configs, changed)


def _median(rounds: Sequence[float] | None) -> float | None:
    return statistics.median(rounds) if rounds else None


def _set_status(
    database: Database, lease: Lease, job_id: int, status: JobStatus, error: str | None = None
) -> None:
    from db import repository

    with database.session() as s:
        repository.check_lease(s, lease)
        repository.set_job_status(s, job_id, status, error)


def run_revalidation(
    database: Database,
    pool: Pool,
    job_id: int,
    lease: Lease,
    *,
    stop: Callable[[], bool] = lambda: False,
    cancelled: Callable[[], bool] = lambda: False,
    kernel_modules: Collection[str] = (),
) -> JobStatus:
    """Run revalidation job ``job_id`` on ``pool`` under ``lease`` (see the module doc) and
    return the status it ended in: ``done``, ``cancelled``, or ``queued`` when ``stop()`` said
    to hand it back. Every write is fenced on ``lease`` (LeaseLost: nothing more is written); a
    ``module:attribute`` kernel the row names loads only from ``kernel_modules``."""
    from db import repository

    with database.session() as s:
        repository.check_lease(s, lease)
        record = repository.get_job(s, job_id)
        spec = RevalidationSpec.from_mapping(record.spec)
        if record.status is not JobStatus.RUNNING or record.started_at is None:
            repository.set_job_status(s, job_id, JobStatus.RUNNING)
        done = repository.retimed_by_job(s, job_id)
    stale: list[dict[str, Any]] = []
    for best_id in spec.best_ids:
        if stop():
            _set_status(database, lease, job_id, JobStatus.QUEUED)
            return JobStatus.QUEUED
        if cancelled():
            _set_status(database, lease, job_id, JobStatus.CANCELLED)
            return JobStatus.CANCELLED
        if best_id in done:
            continue
        with database.session(readonly=True) as s:
            try:
                best = repository.get_best_by_id(s, best_id)
            except NotFound:
                continue  # the row is gone (its kernel version dropped): nothing to re-time
            key = _candidates(s, spec, best, record.kernel_id, kernel_modules)
        retimed = pool.retime(
            [(spec.device_class, spec.kernel, key.problem, key.candidates)], spec.rounds
        )[0]
        medians = [_median(m) for m in retimed] if retimed else [None] * len(key.candidates)
        now_ms = medians[0] if medians else None
        vendor = [
            ms
            for c, ms in zip(key.candidates, medians, strict=False)
            if isinstance(c, VendorPath) and ms is not None
        ]
        verdict = judge(best.time_ms, now_ms, spec.threshold)
        with database.session() as s:
            repository.check_lease(s, lease)
            env_id = _environment_id(s, spec)
            repository.mark_revalidation(s, best.id, verdict, now_ms, env_id)
            repository.record_retiming(
                s,
                best.id,
                verdict,
                best.time_ms,
                now_ms,
                job_id=job_id,
                environment_id=env_id,
                vendor_ms=min(vendor) if vendor else None,
                noise=best.noise,
                changed=changes_line(key.changed),
            )
        if verdict in STALE_STATES:
            stale.append(key.problem)
    with database.session() as s:
        repository.check_lease(s, lease)
        if spec.retune:
            stale = _stale_problems(s, job_id) or stale
            if stale:
                _queue_retune(s, spec, record.kernel_id, stale)
        repository.set_job_status(s, job_id, JobStatus.DONE)
    return JobStatus.DONE


def _environment_id(s: Session, spec: RevalidationSpec) -> int | None:
    from orchestrator.run.revalidate import environment_id

    return environment_id(s, spec.device_class, spec.environment)


def _stale_problems(s: Session, job_id: int) -> list[dict[str, Any]]:
    """The problems of the rows this job (also before a resume) found regressed or failed."""
    import json

    from db import repository

    out: list[dict[str, Any]] = []
    for best_id, state in repository.retimed_by_job(s, job_id).items():
        if state in STALE_STATES:
            try:
                out.append(json.loads(repository.get_best_by_id(s, best_id).problem_key))
            except NotFound:
                continue
    return out


def _queue_retune(
    s: Session, spec: RevalidationSpec, kernel_id: int, problems: list[dict[str, Any]]
) -> int:
    """Queue a tuning job of ``problems`` on the class for the job's team; its id."""
    from db import repository

    tune = JobSpec.from_mapping(
        {
            "kernel": spec.kernel,
            "problems": problems,
            "device_classes": [spec.device_class],
            "objective": spec.objective.value,
            "team": spec.team,
        }
    )
    job_id = repository.create_job(s, kernel_id, tune.to_dict(), spec.team)
    repository.write_audit(
        s,
        action="job.retune",
        target=f"job {job_id}",
        team=spec.team,
        detail={"via": "revalidation", "problems": len(problems)},
    )
    return job_id

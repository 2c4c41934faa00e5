"""Stack changes are seen: a server's scheduler schedules revalidation jobs on its own.

:func:`watch` is called by the scheduler for each (device class, environment) its live workers
report: it marks the stack (``tf_stack_marks``), then finds the class's stored bests that need
timing there (measured under another driver, runtime, Triton or torch and not yet revalidated
in this one; with ``every_days``, also those last checked longer ago) and writes one queued
revalidation job (:mod:`orchestrator.run.revalidation_job`) per (team that produced them,
kernel, objective), unless a queued or running one already covers a row, and within the team's
quota of revalidation jobs per day. Only rows of the installed kernel version are re-timed
(another version's code is not here to run).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from db import JobKind, Objective
from orchestrator.errors import OrchestratorError
from orchestrator.run.revalidate import DEFAULT_THRESHOLD, environment_id
from orchestrator.run.revalidation_job import RevalidationSpec
from search_spaces.bundle_env import differences
from search_spaces.errors import SpecError
from search_spaces.registry import spec_from_storage
from workers.device import Backend, Fingerprint

if TYPE_CHECKING:
    from db import BestRecord, Database, Session

log = logging.getLogger("tunefleet.revalidation")

#: Teams whose retune policy is on when :attr:`RevalidationPolicy.retune_teams` holds it.
ALL_TEAMS = "*"


@dataclass(frozen=True)
class RevalidationPolicy:
    """The operator's switches (``tunefleet serve``'s ``--revalidate-on-change``,
    ``--revalidate-every``, ``--revalidate-quota`` and ``--revalidate-retune``): ``on_change``
    schedules a revalidation when a worker's stack differs from the one a stored best was measured
    in; ``every_days`` also re-checks bests last checked longer ago (None: never); ``quota`` is the
    most revalidation jobs scheduled per team in a day; ``retune_teams`` the teams (``*``: all)
    whose regressed and failed rows are queued for tuning again; ``threshold`` as in
    ``tunefleet revalidate``."""

    on_change: bool = True
    every_days: float | None = None
    quota: int = 24
    retune_teams: frozenset[str] = frozenset()
    threshold: float = DEFAULT_THRESHOLD

    def __post_init__(self) -> None:
        if self.every_days is not None and not self.every_days > 0:
            raise OrchestratorError(f"--revalidate-every must be positive, got {self.every_days}")
        if self.quota < 0:
            raise OrchestratorError(f"--revalidate-quota must be 0 or more, got {self.quota}")
        if self.threshold < 1:
            raise OrchestratorError(f"the threshold must be at least 1, got {self.threshold}")

    @property
    def active(self) -> bool:
        """Whether this policy ever schedules anything."""
        return self.quota > 0 and (self.on_change or self.every_days is not None)

    def retunes(self, team: str | None) -> bool:
        return ALL_TEAMS in self.retune_teams or (team is not None and team in self.retune_teams)


def stack_of(fingerprint: Fingerprint) -> dict[str, str]:
    """The environment a worker reports: triton, torch, driver and runtime ("" when unknown)."""
    return {
        "triton": fingerprint.triton or "",
        "torch": fingerprint.torch or "",
        "driver": fingerprint.driver or "",
        "runtime": fingerprint.runtime or "",
    }


def _installed(best: BestRecord, allowed: Collection[str]) -> bool:
    """Whether ``best`` is of the installed version of a kernel this process may load (a
    ``module:attribute`` a row names is imported only from ``allowed``)."""
    try:
        return spec_from_storage(best.kernel_name, allowed).version_hash() == best.kernel_version
    except SpecError:
        return False


def watch(
    database: Database,
    fingerprint: Fingerprint,
    policy: RevalidationPolicy,
    *,
    owner: str = "",
    kernel_modules: Collection[str] = (),
) -> list[int]:
    """Mark ``fingerprint``'s class and stack (whatever the policy) and queue the revalidation
    jobs the policy calls for (see the module doc); their ids. Bests of a ``module:attribute``
    kernel are revalidated only if it or its module is in ``kernel_modules``."""
    from db import repository, utcnow

    cls = fingerprint.device_class
    stack = stack_of(fingerprint)
    now = utcnow()
    gpu = fingerprint.backend in (Backend.CUDA, Backend.ROCM)
    with database.session() as s:
        class_id = repository.ensure_device_class(
            s, cls.key, cls.vendor.value, cls.name, cls.arch, cls.replay
        )
        env_id = environment_id(s, cls.key, stack)
        assert env_id is not None  # the class row exists now
        repository.mark_stack(s, class_id, env_id)
        if not policy.active:
            return []
        repository.lock_revalidation_queue(s)
        every = policy.every_days
        due = repository.bests_to_revalidate(
            s,
            cls.key,
            env_id,
            changed=policy.on_change,
            checked_before=None if every is None else now - timedelta(days=every),
        )
        covered = {
            int(i)
            for job in repository.open_jobs_of_kind(s, JobKind.REVALIDATE)
            for i in job.spec.get("best_ids", [])
        }
        due = [
            b
            for b in due
            if b.id not in covered
            and _installed(b, kernel_modules)
            and (gpu or b.objective is Objective.KERNEL)  # graph timing needs a GPU
        ]
        groups: dict[tuple[str | None, str, Objective], list[BestRecord]] = {}
        for best in due:
            groups.setdefault((best.team, best.kernel_name, best.objective), []).append(best)
        created = []
        for (team, kernel, objective), bests in sorted(groups.items(), key=lambda kv: str(kv[0])):
            used = repository.count_jobs_since(s, JobKind.REVALIDATE, team, now - timedelta(days=1))
            if used >= policy.quota:
                log.warning(
                    "revalidation of %d %s row(s) of team %s on %s skipped: the team's quota of "
                    "%d revalidation jobs a day is used",
                    len(bests),
                    kernel,
                    team,
                    cls.key,
                    policy.quota,
                )
                continue
            created.append(
                _queue(
                    s,
                    kernel,
                    objective,
                    team,
                    cls.key,
                    stack,
                    bests,
                    policy,
                    every,
                    owner,
                    kernel_modules,
                )
            )
    return created


def _reason(
    s: Session, stack: dict[str, str], bests: Iterable[BestRecord], every: Any
) -> tuple[str, list[str]]:
    from db import repository

    changed: list[str] = []
    for best in bests:
        if best.environment_id is None:
            continue
        env = repository.get_environment(s, best.environment_id)
        stored = {
            "triton": env.triton_version,
            "torch": env.torch_version,
            "driver": env.driver,
            "runtime": env.runtime,
        }
        changed.extend(c for c in differences(stored, stack) if c not in changed)
    if changed:
        return "stack change: " + "; ".join(changed), changed
    return f"scheduled: last checked over {every:g} day(s) ago", changed


def _queue(
    s: Session,
    kernel: str,
    objective: Objective,
    team: str | None,
    class_key: str,
    stack: dict[str, str],
    bests: list[BestRecord],
    policy: RevalidationPolicy,
    every: float | None,
    owner: str,
    allowed: Collection[str],
) -> int:
    """Write one queued revalidation job of ``bests`` (and its audit row); its id."""
    import json

    from db import repository

    spec = spec_from_storage(kernel, allowed)
    reason, changed = _reason(s, stack, bests, every)
    job = RevalidationSpec(
        kernel=kernel,
        device_class=class_key,
        environment=stack,
        best_ids=tuple(b.id for b in bests),
        problems=tuple(json.loads(b.problem_key) for b in bests),
        reason=reason,
        objective=objective,
        team=team,
        threshold=policy.threshold,
        retune=policy.retunes(team),
        changed=tuple(changed),
    )
    kernel_id = repository.ensure_kernel(s, spec.name, spec.version_hash(), spec.space.hash())
    job_id = repository.create_job(s, kernel_id, job.to_dict(), team, kind=JobKind.REVALIDATE)
    repository.write_audit(
        s,
        action="job.revalidate",
        team=team,
        target=f"job {job_id}",
        detail={"via": "scheduler", "owner": owner, "class": class_key, "reason": reason[:200]},
    )
    log.info(
        "job %d: revalidation of %d %s row(s) on %s (%s)",
        job_id,
        len(bests),
        kernel,
        class_key,
        reason,
    )
    return job_id

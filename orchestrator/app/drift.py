"""Drift is visible: one stored best's history of re-timings, for the page and the API.

:func:`key_drift` reads a best-config key's row and its newest re-timings (``tunefleet
revalidate`` and the server's revalidation jobs), each with the stored time then, the re-timed
one, their ratio, the vendor path's re-timed time, the row's noise floor, the environment it
ran in, what differs from the stack the best was measured in (``changed``) and from the
re-timing before it (``stack_changed``). ``regressions`` are the points where the key went from
holding (or nothing) to regressed or failed: where the config regressed, after which change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from db import Database, Objective, repository
from db.repository import RetimingRecord
from db.states import STALE_STATES
from orchestrator.app.views import View
from orchestrator.errors import InvalidRequest, NotFound
from search_spaces.bundle_env import ENV_FIELDS, differences
from search_spaces.errors import SpecError
from search_spaces.problem import problem_key
from search_spaces.registry import spec_from_storage

#: Most re-timings one answer holds (the newest).
MAX_POINTS = 5000


@dataclasses.dataclass(frozen=True)
class DriftPoint(View):
    """One re-timing: ``ms`` (None: it failed) over ``stored_ms`` is ``ratio``; ``noise`` the
    row's relative noise floor then; ``environment`` the stack it ran in."""

    at: str
    state: str
    stored_ms: float
    ms: float | None
    ratio: float | None
    vendor_ms: float | None
    noise: float | None
    job_id: int | None
    environment: dict[str, Any]
    changed: str | None
    stack_changed: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class DriftView(View):
    """A best-config key (its row now) and its newest re-timings, oldest first."""

    kernel: str
    kernel_version: str
    problem: dict[str, Any]
    device_class: str
    triton: str
    objective: Objective
    config: dict[str, Any]
    time_ms: float
    backend: str
    noise: float | None
    revalidation: str | None
    points: tuple[DriftPoint, ...]
    regressions: tuple[DriftPoint, ...]


def _environment(r: RetimingRecord) -> dict[str, Any]:
    return {k: getattr(r, k) for k in ENV_FIELDS if getattr(r, k) is not None}


def _points(rows: list[RetimingRecord]) -> list[DriftPoint]:
    out = []
    before: dict[str, Any] = {}
    for r in rows:
        env = _environment(r)
        out.append(
            DriftPoint(
                at=r.at.isoformat(),
                state=r.state.value,
                stored_ms=r.stored_ms,
                ms=r.time_ms,
                ratio=None if r.time_ms is None else r.time_ms / r.stored_ms,
                vendor_ms=r.vendor_ms,
                noise=r.noise,
                job_id=r.job_id,
                environment=env,
                changed=r.changed,
                stack_changed=tuple(differences(before, env)),
            )
        )
        before = env or before
    return out


def key_drift(
    database: Database,
    *,
    kernel: str,
    problem: str,
    device_class: str,
    objective: Objective | str = Objective.KERNEL,
    triton: str | None = None,
    limit: int = 1000,
    allowed: Collection[str] = (),
) -> DriftView:
    """The drift history of the installed version of ``kernel`` on ``problem`` (``M=..,..``)
    and ``device_class`` (``triton``: its Triton minor; None: the row updated last); NotFound
    when no best is stored for the key or ``kernel`` is a ``module:attribute`` outside ``allowed``
    (nothing a request names is imported unless the operator allowed it), InvalidRequest for a malformed problem or limit."""
    if not 1 <= limit <= MAX_POINTS:
        raise InvalidRequest(f"limit must be between 1 and {MAX_POINTS}, got {limit}")
    try:
        spec = spec_from_storage(kernel, allowed)
    except SpecError as exc:
        raise NotFound(str(exc)) from None
    try:
        parsed = spec.parse_problem(problem)
        chosen = Objective(objective)
    except (SpecError, ValueError) as exc:
        raise InvalidRequest(str(exc)) from None
    with database.session(readonly=True) as s:
        best = repository.find_best(
            s, spec.name, spec.version_hash(), problem_key(parsed), device_class, chosen, triton
        )
        if best is None:
            raise NotFound(
                f"no best config of {spec.name} on {problem} for {device_class} ({chosen.value})"
            )
        rows = repository.retimings(s, best.id, limit)
    points = _points(rows)
    regressions = [
        p
        for i, p in enumerate(points)
        if p.state in {s.value for s in STALE_STATES}
        and (i == 0 or points[i - 1].state not in {s.value for s in STALE_STATES})
    ]
    return DriftView(
        kernel=spec.name,
        kernel_version=best.kernel_version,
        problem=dict(parsed),
        device_class=best.device_class_key,
        triton=best.triton_minor,
        objective=best.objective,
        config=dict(best.config),
        time_ms=best.time_ms,
        backend=best.backend.value,
        noise=best.noise,
        revalidation=None if best.revalidation is None else best.revalidation.value,
        points=tuple(points),
        regressions=tuple(regressions),
    )

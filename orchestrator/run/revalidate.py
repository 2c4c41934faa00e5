"""``tunefleet revalidate``: re-time stored best configs in this environment, flag regressions.

A stored best was timed under some triton/torch/driver/runtime (its ``tf_environments`` row). After
an upgrade it may no longer be the best, or even as fast: vLLM and SGLang saw tuned configs lose
from one Triton release to the next. :func:`revalidate` times every stored best of a kernel version
on one device class again, through a caller-given timing function (the CLI's runs the trial
runner on this machine's device), gives each a :class:`Verdict` and marks its row with it (the
verdict, when, the re-timed median and this environment) and appends it to the row's drift
history (``tf_retimings``, with the row's noise floor and what changed): ``best`` and bundles
then flag the regressed and failed ones, and a re-tune replaces them when faster than their
re-timed time. A server schedules the same re-timing as a job of its own
(:mod:`orchestrator.run.revalidation_job`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from db import Objective
from db.states import RevalidationState
from orchestrator.errors import OrchestratorError
from search_spaces.bundle_env import differences
from search_spaces.spec import KernelSpec

if TYPE_CHECKING:
    from db import BestRecord, Database, Session
    from workers.measurement import Measurement

#: Re-timed / stored above this counts as a regression (noise here is a few percent).
DEFAULT_THRESHOLD = 1.05

TimeConfig = Callable[[dict[str, Any], dict[str, Any]], "Measurement"]


#: The verdict on one stored best: the state its row is marked with.
Verdict = RevalidationState


@dataclass(frozen=True)
class Revalidation:
    """One stored best re-timed: its row, problem and config, both times and the verdict."""

    best_id: int
    problem: dict[str, Any]
    config: dict[str, Any]
    stored_ms: float
    now_ms: float | None
    verdict: Verdict
    changed: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        return None if self.now_ms is None else self.now_ms / self.stored_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "problem": self.problem,
            "config": self.config,
            "stored_ms": self.stored_ms,
            "now_ms": self.now_ms,
            "ratio": self.ratio,
            "verdict": self.verdict.value,
            "environment_changed": self.changed,
            "error": self.error,
        }


def revalidate(
    database: Database,
    spec: KernelSpec,
    device_class: str,
    current: Mapping[str, Any],
    time_config: TimeConfig,
    threshold: float = DEFAULT_THRESHOLD,
    objective: Objective = Objective.KERNEL,
) -> list[Revalidation]:
    """Re-time every stored best of ``spec``'s installed version on ``device_class`` and mark each
    row with its verdict; raises OrchestratorError when there is none. ``current`` is this
    environment (triton, torch, driver, runtime): it names what changed since each best was
    stored, and the marks refer to it."""
    from db import repository
    from workers.measurement import Outcome

    with database.session(readonly=True) as s:
        rows = repository.get_best(
            s,
            spec.name,
            device_class_key=device_class,
            kernel_version=spec.version_hash(),
            objective=objective,
        )
        stored_env = {}
        for r in rows:
            if r.environment_id is not None and r.environment_id not in stored_env:
                env = repository.get_environment(s, r.environment_id)
                stored_env[r.environment_id] = {
                    "triton": env.triton_version,
                    "torch": env.torch_version,
                    "driver": env.driver,
                    "runtime": env.runtime,
                }
    if not rows:
        raise OrchestratorError(
            f"no stored best configs of {spec.name} version {spec.version_hash()} on "
            f"{device_class} (objective {objective.value}); nothing to revalidate"
        )
    out = []
    for r in rows:
        problem = json.loads(r.problem_key)
        changed = differences(stored_env.get(r.environment_id or -1, {}), current)
        m = time_config(problem, dict(r.config))
        if m.outcome is not Outcome.OK or m.median_ms is None:
            out.append(
                Revalidation(
                    r.id,
                    problem,
                    dict(r.config),
                    r.time_ms,
                    None,
                    Verdict.FAILED,
                    changed,
                    m.error or m.outcome.value,
                )
            )
            continue
        verdict = judge(r.time_ms, m.median_ms, threshold)
        out.append(
            Revalidation(r.id, problem, dict(r.config), r.time_ms, m.median_ms, verdict, changed)
        )
    _mark(database, device_class, current, out)
    return out


def judge(stored_ms: float, now_ms: float | None, threshold: float = DEFAULT_THRESHOLD) -> Verdict:
    """The verdict on a stored best re-timed at ``now_ms`` (None: it did not run ok)."""
    if now_ms is None:
        return Verdict.FAILED
    return Verdict.REGRESSED if now_ms > threshold * stored_ms else Verdict.HOLDS


def changes_line(changed: list[str]) -> str | None:
    """What changed in the stack, as the drift history stores it (None: nothing)."""
    return "; ".join(changed)[:500] or None


def environment_id(s: Session, device_class: str, current: Mapping[str, Any]) -> int | None:
    """The id of environment ``current`` (triton, torch, driver, runtime) of ``device_class``,
    created if new; None when the class has no row."""
    from db import repository

    cls = repository.device_class_by_key(s, device_class)
    if cls is None:
        return None
    return repository.ensure_environment(
        s,
        cls.id,
        str(current.get("driver") or ""),
        str(current.get("runtime") or ""),
        str(current.get("triton") or ""),
        str(current.get("torch") or ""),
    )


def _mark(
    database: Database, device_class: str, current: Mapping[str, Any], found: list[Revalidation]
) -> None:
    """Write each verdict onto its best-config row and its drift history, with this environment
    (one transaction)."""
    from db import repository

    with database.session() as s:
        env_id = environment_id(s, device_class, current)
        for r in found:
            best = repository.get_best_by_id(s, r.best_id)
            repository.mark_revalidation(s, r.best_id, r.verdict, r.now_ms, env_id)
            repository.record_retiming(
                s,
                r.best_id,
                r.verdict,
                r.stored_ms,
                r.now_ms,
                environment_id=env_id,
                noise=best.noise,
                changed=changes_line(r.changed),
            )


def revalidation_mark(best: BestRecord) -> dict[str, Any] | None:
    """How ``best --json``, the API and bundles show a row's last revalidation: its state, when,
    the re-timed ms (None when it failed) and re-timed / stored; None if it was never
    revalidated (or was tuned since)."""
    if best.revalidation is None:
        return None
    ms = best.revalidated_ms
    return {
        "state": best.revalidation.value,
        "at": None if best.revalidated_at is None else best.revalidated_at.isoformat(),
        "ms": ms,
        "ratio": None if ms is None else ms / best.time_ms,
    }


def retune_arguments(kernel: str, device_class: str, found: list[Revalidation]) -> list[str]:
    """``tunefleet tune`` arguments that tune the regressed and failed problems again."""
    args = ["tune", kernel, "--device-class", device_class]
    for r in found:
        if r.verdict is not Verdict.HOLDS:
            args += ["-p", ",".join(f"{k}={v}" for k, v in r.problem.items())]
    return args

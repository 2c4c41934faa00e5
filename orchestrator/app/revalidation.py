"""The revalidate use case on this machine: re-time a kernel's stored bests of one device class on
this machine's device, in its current environment, and mark each row (orchestrator.run.revalidate).

It runs only where the database is at hand: a server stores only times its own workers measured,
so a client never posts re-timings to one (see :class:`orchestrator.app.client.Client`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from orchestrator.errors import InvalidRequest, OrchestratorError
from orchestrator.run.revalidate import DEFAULT_THRESHOLD, Revalidation, revalidate
from search_spaces.registry import get_spec
from workers.device_table import canonical_class_key

if TYPE_CHECKING:
    from db import Database


@dataclasses.dataclass(frozen=True)
class RevalidationReport:
    """The stored bests of ``kernel`` on ``device_class`` re-timed here, one result each."""

    kernel: str
    device_class: str
    results: tuple[Revalidation, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "device_class": self.device_class,
            "results": [r.to_dict() for r in self.results],
        }


def revalidate_here(
    database: Database,
    kernel: str,
    device_class: str,
    *,
    device: str = "auto",
    threshold: float = DEFAULT_THRESHOLD,
) -> RevalidationReport:
    """Re-time the stored bests of ``kernel`` for ``device_class`` on this machine's ``device``
    (which must be of that class) and mark their rows; above ``threshold`` (re-timed / stored)
    is a regression."""
    from workers.device import detect
    from workers.runner import RunnerOptions, TrialRequest, TrialRunner

    if threshold < 1:
        raise InvalidRequest(f"--threshold must be at least 1, got {threshold}")
    spec = get_spec(kernel)
    wanted = canonical_class_key(device_class)
    fingerprint = detect(device)[0]
    here = fingerprint.device_class.key
    if here.casefold() != wanted.casefold():
        raise OrchestratorError(
            f"this machine's device is {here}, not {wanted}: revalidate on a {wanted}"
        )
    current = {
        "triton": fingerprint.triton,
        "torch": fingerprint.torch,
        "driver": fingerprint.driver,
        "runtime": fingerprint.runtime,
    }
    options = RunnerOptions.for_backend(fingerprint.backend, compile_workers=0)
    with TrialRunner(options, fingerprint=fingerprint) as runner:
        found = revalidate(
            database,
            spec,
            here,
            current,
            lambda problem, config: runner.run(TrialRequest(kernel, problem, config)),
            threshold,
        )
    return RevalidationReport(spec.name, here, tuple(found))

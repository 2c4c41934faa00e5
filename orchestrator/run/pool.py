"""The pool the driver measures trials on: the :class:`Pool` protocol and the types it speaks.

Implementations: :class:`orchestrator.run.dispatch.WorkerPool` (Ray actors, one per device, routed
by device class) and :class:`orchestrator.run.local_pool.LocalPool` (in-process, no Ray: tests and
single-process tools). Both hold workers whose body is :class:`orchestrator.run.worker.TrialWorker`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from search_spaces.space import Config, DeviceLimits
from workers.device import Fingerprint
from workers.measurement import Measurement
from workers.trial import TrialRequest


@dataclass(frozen=True)
class VendorPath:
    """A re-timing candidate that is the kernel spec's vendor path ``name``, not a config."""

    name: str


#: What a re-timing times: a config, or a vendor path.
Candidate = Config | VendorPath
#: One re-timing job: (device class, kernel, problem, candidates).
RetimeJob = tuple[str, str, dict[str, Any], list[Candidate]]


def retime_request(kernel: str, problem: dict[str, Any], candidate: Candidate) -> TrialRequest:
    """The trial request that times ``candidate`` of ``kernel`` on ``problem``."""
    if isinstance(candidate, VendorPath):
        return TrialRequest(kernel, dict(problem), {}, vendor=candidate.name)
    return TrialRequest(kernel, dict(problem), dict(candidate))


@dataclass(frozen=True)
class WorkerInfo:
    """What a started worker reports: where it runs and which device class it measures."""

    worker: str  # unique in the pool ("<Ray node id>/<pid>", "local/<n>"), recorded per trial
    node_id: str
    host: str
    pid: int
    fingerprint: Fingerprint
    limits: DeviceLimits
    replay_keys: tuple[tuple[str, str], ...] | None = None

    @property
    def class_key(self) -> str:
        return self.fingerprint.device_class.key


@dataclass
class Done:
    """A submitted trial's end: the request and the caller's ``tag`` as submitted, the
    measurement, the worker, and whether the worker was lost (the measurement is then ``infra``
    and the trial may be submitted again)."""

    request: TrialRequest
    tag: object
    measurement: Measurement
    worker: WorkerInfo
    lost: bool = False


class Pool(Protocol):
    """Workers grouped by device class, measuring one trial at a time each.

    Contract: ``submit`` queues a request on a live worker of the class (raises NoWorkersError
    when none is left) and never blocks on the measurement; every submitted request comes back
    exactly once from ``wait`` (as measured, or ``lost``); ``free_slots`` says how many more may
    be submitted to a class now without waiting; ``in_flight`` counts submitted requests not yet
    returned; ``classes`` and ``workers`` list live workers only; ``retime`` measures configs
    again in a fresh process; ``shutdown`` releases the workers (a pool that keeps its workers
    for the next job may leave them running).
    """

    def classes(self) -> dict[str, WorkerInfo]:
        """Device class key -> one live worker of it (its limits and fingerprint stand for all)."""
        ...

    def workers(self, class_key: str | None = None) -> list[WorkerInfo]:
        """Live workers (of one class, if given)."""
        ...

    def free_slots(self, class_key: str) -> int:
        """Requests that may be submitted to ``class_key`` now."""
        ...

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet returned by :meth:`wait`."""
        ...

    def submit(self, class_key: str, request: TrialRequest, tag: object) -> WorkerInfo:
        """Queue ``request`` on the least-busy live worker of ``class_key``; ``tag`` comes back
        in its :class:`Done`."""
        ...

    def wait(self, timeout: float) -> list[Done]:
        """Results ready within ``timeout`` seconds (maybe none)."""
        ...

    def retime(
        self, jobs: Sequence[RetimeJob], rounds: int, timeout_s: float = 600.0
    ) -> list[list[list[float]] | None]:
        """Per job, each candidate's medians (one per round that ended ``ok``), timed again in a
        fresh process, a job's candidates interleaved (:func:`retime_request`); None when the job had no configs or its
        worker was lost or took longer than ``timeout_s``."""
        ...

    def shutdown(self, grace_s: float = 10.0) -> None:
        """Release the workers."""
        ...

"""An in-process pool: the driver's own process measures the trials, no Ray.

:class:`LocalPool` implements :class:`orchestrator.pool.Pool` with one
:class:`orchestrator.worker.TrialWorker` per plan, built from the same plans and options as the
Ray pool (``WorkerPlan("replay", paths)``, ``WorkerPlan("interpreter")``) and so through the same
runners. Trials run one after another, in the order they were submitted, inside :meth:`wait`;
a worker is never lost and never retired. For tests of the driver and single-process tools.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from orchestrator.errors import NoWorkersError
from orchestrator.pool import Done, RetimeJob, WorkerInfo
from orchestrator.worker import PoolOptions, TrialWorker, WorkerPlan
from workers.trial import TrialRequest

#: The node id local workers report (their worker ids are ``local/<n>``).
LOCAL_NODE = "local"


class LocalPool:
    """Workers of ``plans`` in this process (see the module docstring)."""

    def __init__(self, plans: Sequence[WorkerPlan], options: PoolOptions | None = None) -> None:
        if not plans:
            raise NoWorkersError("no workers to start; give at least one worker plan")
        self.options = options or PoolOptions()
        self._workers = [TrialWorker(plan, self.options, node_id=LOCAL_NODE) for plan in plans]
        host, pid = socket.gethostname(), os.getpid()
        self._infos = [
            WorkerInfo(
                f"{LOCAL_NODE}/{n}",
                LOCAL_NODE,
                host,
                pid,
                w.info().fingerprint,
                w.info().limits,
                w.info().replay_keys,
            )
            for n, w in enumerate(self._workers)
        ]
        self._slots = [self.options.slots(plan) for plan in plans]
        self._queued: list[list[tuple[TrialRequest, object]]] = [[] for _ in plans]
        self._closed = False

    def classes(self) -> dict[str, WorkerInfo]:
        out: dict[str, WorkerInfo] = {}
        for info in self.workers():
            out.setdefault(info.class_key, info)
        return out

    def workers(self, class_key: str | None = None) -> list[WorkerInfo]:
        if self._closed:
            return []
        return [i for i in self._infos if class_key in (None, i.class_key)]

    def free_slots(self, class_key: str) -> int:
        return sum(
            max(0, self._slots[n] - len(self._queued[n]))
            for n, info in enumerate(self._infos)
            if info.class_key == class_key and not self._closed
        )

    @property
    def in_flight(self) -> int:
        return sum(len(q) for q in self._queued)

    def submit(self, class_key: str, request: TrialRequest, tag: object) -> WorkerInfo:
        live = [n for n, info in enumerate(self.workers()) if info.class_key == class_key]
        if not live:
            raise NoWorkersError(f"no live worker of class {class_key!r} is left")
        n = min(live, key=lambda i: len(self._queued[i]))
        self._queued[n].append((request, tag))
        return self._infos[n]

    def wait(self, timeout: float) -> list[Done]:
        """Measure every queued trial now (``timeout`` is not needed: nothing waits on others)."""
        out: list[Done] = []
        for n, queue in enumerate(self._queued):
            while queue:
                request, tag = queue.pop(0)
                measurement = self._workers[n].run(request)
                measurement.worker = self._infos[n].worker
                out.append(Done(request, tag, measurement, self._infos[n]))
        return out

    def retime(
        self, jobs: Sequence[RetimeJob], rounds: int, timeout_s: float = 600.0
    ) -> list[list[list[float]] | None]:
        """Each job on the first worker of its class, one after another (``timeout_s`` unused:
        a local call cannot be abandoned)."""
        out: list[list[list[float]] | None] = []
        for class_key, kernel, problem, configs in jobs:
            live = [n for n, info in enumerate(self.workers()) if info.class_key == class_key]
            if not live or not configs:
                out.append(None)
                continue
            (medians,) = self._workers[live[0]].retime([(kernel, problem, configs)], rounds)
            out.append(medians)
        return out

    def shutdown(self, grace_s: float = 10.0) -> None:
        if self._closed:
            return
        for worker in self._workers:
            worker.close()
        self._closed = True

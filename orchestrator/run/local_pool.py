"""An in-process pool: the driver's own process measures the trials, no Ray.

:class:`LocalPool` implements :class:`orchestrator.run.pool.Pool` with one
:class:`orchestrator.run.worker.TrialWorker` per plan, built from the same plans and options as the
Ray pool (``WorkerPlan("replay", paths)``, ``WorkerPlan("interpreter")``) and so through the same
runners. Trials run one at a time in the order they were submitted, the oldest in each
:meth:`wait` call (so the driver sees results arrive while others are in flight, as on a
cluster); a worker is never lost and never retired. For tests of the driver and single-process
tools.
"""

from __future__ import annotations

import os
import socket
from collections import deque
from collections.abc import Sequence

from orchestrator.errors import NoWorkersError
from orchestrator.run.pool import Done, RetimeJob, WorkerInfo
from orchestrator.run.worker import PoolOptions, TrialWorker, WorkerPlan
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
        self._queue: deque[tuple[int, TrialRequest, object]] = deque()
        self._load = [0] * len(plans)  # queued trials per worker
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
            max(0, self._slots[n] - self._load[n])
            for n, info in enumerate(self._infos)
            if info.class_key == class_key and not self._closed
        )

    @property
    def in_flight(self) -> int:
        return len(self._queue)

    def submit(self, class_key: str, request: TrialRequest, tag: object) -> WorkerInfo:
        live = [n for n, info in enumerate(self.workers()) if info.class_key == class_key]
        if not live:
            raise NoWorkersError(f"no live worker of class {class_key!r} is left")
        n = min(live, key=lambda i: self._load[i])
        self._queue.append((n, request, tag))
        self._load[n] += 1
        return self._infos[n]

    def wait(self, timeout: float) -> list[Done]:
        """Measure the oldest queued trial now (``timeout`` unused: it never waits on others)."""
        if not self._queue:
            return []
        n, request, tag = self._queue.popleft()
        self._load[n] -= 1
        measurement = self._workers[n].run(request)
        measurement.worker = self._infos[n].worker
        return [Done(request, tag, measurement, self._infos[n])]

    def retime(
        self, jobs: Sequence[RetimeJob], rounds: int, timeout_s: float = 600.0
    ) -> list[list[list[float]] | None]:
        """A class's jobs in one call to its first worker (one fresh trial process for all of
        them, one job after another); ``timeout_s`` unused: a local call cannot be abandoned."""
        first: dict[str, int] = {}
        for n, info in enumerate(self.workers()):
            first.setdefault(info.class_key, n)
        shares: dict[int, list[int]] = {}
        for j, (class_key, _kernel, _problem, configs) in enumerate(jobs):
            if class_key in first and configs:
                shares.setdefault(first[class_key], []).append(j)
        out: list[list[list[float]] | None] = [None] * len(jobs)
        for n, share in shares.items():
            medians = self._workers[n].retime([jobs[j][1:] for j in share], rounds)
            for j, job_medians in zip(share, medians, strict=True):
                out[j] = job_medians
        return out

    def call_logs(self) -> dict[str, list[str]]:
        """Worker -> the trials it was asked to run (``kernel|problem key|config key``)."""
        return {
            info.worker: w.call_log() for info, w in zip(self._infos, self._workers, strict=True)
        }

    def shutdown(self, grace_s: float = 10.0) -> None:
        if self._closed:
            return
        for worker in self._workers:
            worker.close()
        self._closed = True

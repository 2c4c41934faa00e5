"""A simulated GPU fleet behind the driver's :class:`orchestrator.run.pool.Pool` protocol.

:class:`SimPool` holds any number of simulated workers (a thousand fit in one process: a worker is
a few numbers, not an actor), spread over named nodes, each of one device class. A trial submitted
to a worker is answered at once from recorded landscapes through the real
:class:`workers.replay.ReplayRunner`, and handed back by :meth:`SimPool.wait` only when the worker
would have finished it: each worker measures one trial at a time, busy for
``overhead_s + launches * recorded_ms`` times ``scale`` of wall-clock time, trials queued on it
(up to ``slots``) start when the previous one ends. The classes are the recorded H200 landscapes
relabelled (``replay:sim-<label>``): every class answers with the same H200 times.

What is simulated: the GPUs (their time and their answers) and the cluster (nodes, actors,
Ray's transport). What the pool does not simulate: worker loss (no trial comes back ``lost``),
the re-timing processes (``retime`` answers from the landscape without delay).
"""

from __future__ import annotations

import functools
import gzip
import heapq
import itertools
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from orchestrator.errors import NoWorkersError
from orchestrator.run.pool import Done, RetimeJob, WorkerInfo, retime_request
from search_spaces.space import Config, DeviceLimits, Space
from workers.replay import ReplayOptions, ReplayRunner
from workers.trial import TrialRequest


@dataclass(frozen=True)
class SimTiming:
    """How long a simulated trial keeps its GPU: ``(overhead_s + launches * recorded time) *
    scale`` seconds (``launches``: warm-up plus timed reps of the runner's defaults)."""

    overhead_s: float = 0.5
    launches: int = 30
    scale: float = 1.0

    def busy_s(self, recorded_ms: float | None) -> float:
        return (self.overhead_s + self.launches * (recorded_ms or 0.0) / 1e3) * self.scale


@dataclass
class _Worker:
    info: WorkerInfo
    runner: ReplayRunner
    free_at: float = 0.0
    queued: int = 0
    busy_s: float = 0.0  # seconds of trials this worker ran (started before the window's end)
    intervals: list[tuple[float, float]] = field(default_factory=list)


@dataclass(frozen=True)
class ClassPlan:
    """``workers`` simulated workers of class ``replay:sim-<label>``."""

    label: str
    workers: int


class SimPool:
    """Simulated workers of ``plans`` on ``nodes`` nodes (round robin), answering from the
    landscapes at ``landscapes``; see the module docstring. Thread-safe."""

    def __init__(
        self,
        plans: Sequence[ClassPlan],
        landscapes: Sequence[Path],
        *,
        nodes: int = 1,
        slots: int = 2,
        timing: SimTiming | None = None,
        name: str = "sim",
    ) -> None:
        if not plans or any(p.workers < 1 for p in plans):
            raise NoWorkersError("a simulated pool needs at least one worker per class")
        self.timing = timing or SimTiming()
        self.slots = slots
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, Done]] = []
        self._seq = itertools.count()
        self._workers: list[_Worker] = []
        self._closed = False
        n = 0
        # One runner answers every class (the same landscapes): one copy of them, one memo.
        runner = ReplayRunner(list(landscapes), ReplayOptions(samples=25))
        for plan in plans:
            fingerprint = replace(runner.fingerprint, name=f"sim-{plan.label}")
            keys = tuple(runner.keys())
            for _ in range(plan.workers):
                node = f"{name}-node{n % nodes:03d}"
                info = WorkerInfo(
                    f"{node}/{n}", node, node, n, fingerprint, replace(runner.limits), keys
                )
                self._workers.append(_Worker(info, runner))
                n += 1
        self._by_class: dict[str, list[_Worker]] = {}
        for w in self._workers:
            self._by_class.setdefault(w.info.class_key, []).append(w)
        # Per class: the sum over its workers of max(0, slots - queued), kept as trials are
        # queued and handed back (the driver asks for it before every submit).
        self._free = {k: self.slots * len(ws) for k, ws in self._by_class.items()}

    # ----- the Pool protocol
    def classes(self) -> dict[str, WorkerInfo]:
        return {k: ws[0].info for k, ws in self._by_class.items()} if not self._closed else {}

    def workers(self, class_key: str | None = None) -> list[WorkerInfo]:
        if self._closed:
            return []
        if class_key is None:
            return [w.info for w in self._workers]
        return [w.info for w in self._by_class.get(class_key, [])]

    def free_slots(self, class_key: str) -> int:
        with self._lock:
            return self._free.get(class_key, 0)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._heap)

    def submit(self, class_key: str, request: TrialRequest, tag: object) -> WorkerInfo:
        live = self._by_class.get(class_key) if not self._closed else None
        if not live:
            raise NoWorkersError(f"no live worker of class {class_key!r} is left")
        measurement = live[0].runner.run(request)
        with self._ready:
            w = min(live, key=lambda x: (x.queued, x.free_at))
            now = time.monotonic()
            start = max(now, w.free_at)
            end = start + self.timing.busy_s(measurement.median_ms)
            w.free_at = end
            if w.queued < self.slots:
                self._free[class_key] -= 1
            w.queued += 1
            w.intervals.append((start, end))
            measurement.worker, measurement.host = w.info.worker, w.info.host
            heapq.heappush(
                self._heap, (end, next(self._seq), Done(request, tag, measurement, w.info))
            )
            self._ready.notify_all()
        return w.info

    def wait(self, timeout: float) -> list[Done]:
        deadline = time.monotonic() + timeout
        with self._ready:
            while True:
                now = time.monotonic()
                if self._heap and self._heap[0][0] <= now:
                    break
                if now >= deadline:
                    return []
                due = self._heap[0][0] if self._heap else deadline
                self._ready.wait(max(0.0, min(due, deadline) - now))
            out = []
            while self._heap and self._heap[0][0] <= now:
                _, _, done = heapq.heappop(self._heap)
                out.append(done)
                w = self._worker(done.worker)
                w.queued -= 1
                if w.queued < self.slots:
                    self._free[w.info.class_key] += 1
            return out

    def retime(
        self, jobs: Sequence[RetimeJob], rounds: int, timeout_s: float = 600.0
    ) -> list[list[list[float]] | None]:
        out: list[list[list[float]] | None] = []
        for class_key, kernel, problem, configs in jobs:
            live = self._by_class.get(class_key)
            if not live or not configs:
                out.append(None)
                continue
            medians = []
            for candidate in configs:
                m = live[0].runner.run(retime_request(kernel, problem, candidate))
                medians.append([m.median_ms] * rounds if m.median_ms is not None else [])
            out.append(medians)
        return out

    def shutdown(self, grace_s: float = 10.0) -> None:
        self._closed = True

    # ----- measurements of the simulation
    def _worker(self, info: WorkerInfo) -> _Worker:
        return self._workers[info.pid]

    def summary(self) -> list[dict[str, object]]:
        """Per class: its workers and every trial's busy interval (``time.monotonic`` seconds,
        which every process of the host shares)."""
        with self._lock:
            return [
                {
                    "class": key,
                    "workers": len(ws),
                    "intervals": [(round(a, 3), round(b, 3)) for w in ws for a, b in w.intervals],
                }
                for key, ws in self._by_class.items()
            ]


def busy_share(classes: Sequence[dict[str, Any]], start: float, end: float) -> float:
    """Share of the worker-seconds of ``classes`` (:meth:`SimPool.summary` rows) in [start, end]
    that were busy."""
    whole = {str(c["class"]): [(start, end)] for c in classes}
    return wanted_busy_share(classes, whole, start, end) or 0.0


def _merged(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """``intervals`` as disjoint, ordered intervals covering the same time."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _overlap(a: float, b: float, spans: Sequence[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in spans)


def wanted_busy_share(
    classes: Sequence[dict[str, Any]],
    wanted: dict[str, list[tuple[float, float]]],
    start: float,
    end: float,
) -> float | None:
    """Share of the worker-seconds of ``classes`` (:meth:`SimPool.summary` rows) in [start,
    end] that were busy, counting only the seconds in which the worker's class had a job running
    (``wanted``: class -> the running jobs' intervals): how full the path kept the GPUs that
    had work, apart from the schedule's idle classes. None if no class had a job."""
    busy = total = 0.0
    for c in classes:
        spans = [(max(a, start), min(b, end)) for a, b in _merged(wanted.get(str(c["class"]), []))]
        spans = [(a, b) for a, b in spans if b > a]
        total += int(c["workers"]) * sum(b - a for a, b in spans)
        busy += sum(_overlap(a, b, spans) for a, b in c["intervals"])
    return busy / total if total else None


def landscape_problems(paths: Sequence[Path]) -> list[dict[str, object]]:
    """The problem each landscape file was recorded on."""
    out = []
    for path in paths:
        with gzip.open(path) as f:
            out.append(dict(json.load(f)["problem"]))
    return out


def class_plans(workers: int, labels: Sequence[str]) -> list[ClassPlan]:
    """``workers`` spread as evenly as possible over ``labels``."""
    base, extra = divmod(workers, len(labels))
    return [ClassPlan(label, base + (1 if i < extra else 0)) for i, label in enumerate(labels)]


def search_only_landscapes(landscapes: Sequence[Path]) -> int:
    """Make this process's studies search only the configs the landscapes answer (every matmul
    landscape holds the same 1,176), not the spec's whole space, of which replay answers the rest
    ``invalid``: a simulated fleet whose trials are measured like a real one's. Replaces
    ``orchestrator.study.encoding.valid_configs`` where the planner and the samplers look it up; call
    before any study starts. The number of configs the first landscape holds."""
    from orchestrator.run import planning
    from orchestrator.study import encoding, search

    runner = ReplayRunner([landscapes[0]])
    ((kernel, key),) = runner.keys()
    problem = json.loads(key)
    whole = encoding.valid_configs

    @functools.lru_cache(maxsize=16)
    def answered(space: Space, limits: DeviceLimits) -> tuple[Config, ...]:
        return tuple(
            c
            for c in whole(space, limits)
            if runner.answers(TrialRequest(kernel, problem, dict(c)))
        )

    encoding.valid_configs = answered  # type: ignore[assignment]
    planning.valid_configs = answered  # type: ignore[assignment]
    search.valid_configs = answered  # type: ignore[assignment]
    return len(runner.landscapes[0].results)

"""Lost worker actors come back: :class:`Healer` starts a replacement for each.

A lost actor (its process killed, its node gone) is replaced by a fresh actor of the same plan:
started at once, without blocking (its first ``info`` call is polled), and tried again after a
failed or timed-out start with a backoff doubling from ``BACKOFF_S`` up to ``MAX_BACKOFF_S``. At
most ``MAX_STARTS`` replacements of one device class start within ``WINDOW_S``: a class whose
workers keep dying waits for the window instead of starting actors in a loop. The pool asks
:meth:`Healer.state` why a class has no live worker, for its health report.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from orchestrator.run.pool import WorkerInfo
from orchestrator.run.worker import WorkerPlan

#: Replacements of one device class started within ``WINDOW_S`` seconds, at most.
MAX_STARTS = 5
WINDOW_S = 600.0
#: Seconds before a failed start is tried again, doubled per failure up to ``MAX_BACKOFF_S``.
BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0


@dataclass
class _Pending:
    """A replacement to start (``actor`` None) or starting (its ``info`` call in ``ref``)."""

    plan: WorkerPlan
    slots: int
    class_key: str
    due: float
    failures: int = 0
    actor: Any = None
    ref: Any = None
    started: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class Started:
    """A replacement that reported: its actor, what it reported, its plan and slots."""

    actor: Any
    info: WorkerInfo
    plan: WorkerPlan
    slots: int


class Healer:
    """Replacements of a pool's lost actors (see the module doc); thread-safe.

    ``start`` creates an actor of a plan (not waiting for it); ``timeout_s`` is how long one may
    take to report before its start counts as failed."""

    def __init__(
        self,
        start: Callable[[WorkerPlan], Any],
        timeout_s: float,
        *,
        max_starts: int = MAX_STARTS,
        window_s: float = WINDOW_S,
        backoff_s: float = BACKOFF_S,
        max_backoff_s: float = MAX_BACKOFF_S,
    ) -> None:
        self._start = start
        self.timeout_s = timeout_s
        self.max_starts, self.window_s = max_starts, window_s
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self._lock = threading.Lock()
        self._pending: list[_Pending] = []
        self._starts: dict[str, list[float]] = {}  # class -> start times within the window

    def lost(self, plan: WorkerPlan, slots: int, class_key: str) -> None:
        """An actor of ``plan`` was lost: replace it (started by the next :meth:`poll`)."""
        with self._lock:
            self._pending.append(_Pending(plan, slots, class_key, due=time.monotonic()))

    def poll(self, wait_for: Collection[str] = ()) -> list[Started]:
        """Start the replacements that are due (within the cap) and collect those that have
        reported; for a class in ``wait_for`` (one left without live workers) wait until its
        replacement reports or its start times out."""
        out: list[Started] = []
        with self._lock:
            for p in list(self._pending):
                if p.actor is None and not self._begin(p):
                    continue
                timeout = 0.0
                if p.class_key in wait_for:
                    timeout = max(0.0, p.started + self.timeout_s - time.monotonic())
                ready, _ = ray.wait([p.ref], timeout=timeout)
                if not ready:
                    if time.monotonic() - p.started < self.timeout_s:
                        continue
                    self._failed(p, f"it did not start within {self.timeout_s:g} s")
                    continue
                try:
                    info: WorkerInfo = ray.get(p.ref)
                except (RayActorError, RayTaskError) as exc:
                    self._failed(p, str(exc).strip().splitlines()[-1][:300])
                    continue
                self._pending.remove(p)
                out.append(Started(p.actor, info, p.plan, p.slots))
        return out

    def _begin(self, p: _Pending) -> bool:
        """Start ``p``'s actor if it is due and the class's cap allows (lock held)."""
        now = time.monotonic()
        if now < p.due:
            return False
        recent = [t for t in self._starts.get(p.class_key, []) if now - t < self.window_s]
        self._starts[p.class_key] = recent
        if len(recent) >= self.max_starts:
            p.due = recent[0] + self.window_s
            p.error = f"{len(recent)} replacements started within {self.window_s:g} s"
            return False
        recent.append(now)
        p.started = now
        try:
            p.actor = self._start(p.plan)
            p.ref = p.actor.info.remote()
        except Exception as exc:  # Ray raises many types when it cannot place an actor
            self._failed(p, str(exc).strip().splitlines()[-1][:300] if str(exc) else repr(exc))
            return False
        return True

    def _failed(self, p: _Pending, error: str) -> None:
        """``p``'s start failed: kill what was started, try again after the backoff."""
        if p.actor is not None:
            with contextlib.suppress(Exception):  # never started: nothing to release
                ray.kill(p.actor)
        p.actor = p.ref = None
        p.failures += 1
        p.error = error
        p.due = time.monotonic() + min(self.backoff_s * 2 ** (p.failures - 1), self.max_backoff_s)

    def state(self, class_key: str) -> str:
        """What is being done about ``class_key``'s lost workers, in a few words."""
        with self._lock:
            pending = [p for p in self._pending if p.class_key == class_key]
        if not pending:
            return "none is being replaced"
        starting = [p for p in pending if p.actor is not None]
        if starting:
            return "a replacement is starting"
        p = min(pending, key=lambda x: x.due)
        wait = max(0.0, p.due - time.monotonic())
        return f"next replacement in {wait:.0f} s; last: {p.error}"

    def close(self) -> None:
        """Kill the replacements still starting and forget the rest (the pool shuts down)."""
        with self._lock:
            for p in self._pending:
                if p.actor is not None:
                    with contextlib.suppress(Exception):  # already gone
                        ray.kill(p.actor)
            self._pending.clear()

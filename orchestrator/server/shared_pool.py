"""One device class group's pool shared by every job that runs on it, fair by team.

The scheduler runs several jobs of one class at once on the class's pool. Each job's driver sees a
:class:`JobView` (an :class:`orchestrator.run.pool.Pool`): its submissions are tagged with the view,
and ``wait`` hands each job its own results only (whichever view collects from the pool routes
the others' results to their views).

Fair share (``free_slots``): a class's slots (free ones plus those in flight) are divided max-min
fair, first between the teams with a job on the class, then between each team's jobs
(:func:`water_fill`). A job that wants more than its share is capped at it; one that wants less
(its studies asked for nothing the last time it was offered a slot) counts only what it has in
flight, so the others share the rest and no slot idles. A job over its share (it started when the
class was empty) keeps its trials and gets no new slot until it is back under its share: the
class converges to the fair split within one trial's duration. The asking job always counts as
wanting more, so a job that was satisfied gets its share back as soon as it asks.

A class's split is kept with what it was computed from: its users, the class's slots, which
users were satisfied and what they had in flight. An asking job that wants more (the usual case)
reads its share from the kept split while those are unchanged; a job that is offered a slot is
satisfied only until it submits, so a split is usually valid again after each submit.

The underlying pool need not be thread-safe: every call to it holds one lock. With one job on the
pool ``wait`` blocks in the pool as before; with several, one waiting job at a time collects,
polling the pool (``wait(0)``) every ``POLL_S`` so that no job's submissions wait behind a blocking
``wait``; the others sleep until results are routed to them or the collector hands over.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from orchestrator.run.pool import Done, Pool, RetimeJob, WorkerInfo
from workers.trial import TrialRequest

#: Seconds between polls of the pool while several jobs share it.
POLL_S = 0.02


def water_fill(capacity: float, demands: Mapping[Hashable, float]) -> dict[Hashable, float]:
    """Max-min fair split of ``capacity``: each key gets its demand or an equal share of what
    is left, whichever is less (``math.inf``: wants everything it can get)."""
    out: dict[Hashable, float] = {}
    left = capacity
    keys = sorted(demands, key=lambda k: demands[k])
    for i, key in enumerate(keys):
        out[key] = min(demands[key], left / (len(keys) - i))
        left -= out[key]
    return out


@dataclass(frozen=True)
class _Tagged:
    view: JobView
    tag: object


class SharedPool:
    """``pool`` shared by the jobs that hold a :meth:`view` of it; see the module docstring."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._pool_lock = threading.Lock()  # every call into ``pool``
        self._state = threading.Condition()  # views, counts, routed results
        self._views: list[JobView] = []
        self._collecting = False
        # Per class: the users' trials in flight, a count bumped when a user joins or leaves,
        # the satisfied users, the last split with what it was computed from (_allowance).
        self._users_flying: dict[str, int] = {}
        self._joins: dict[str, int] = {}
        self._satisfied: dict[str, set[JobView]] = {}
        self._splits: dict[str, tuple[tuple[object, ...], dict[JobView, int]]] = {}

    def view(self, job_id: int, team: str | None) -> JobView:
        """A new job's view (``team`` None: the job is a team of its own)."""
        view = JobView(self, job_id, team if team is not None else f"job {job_id}")
        with self._state:
            self._views.append(view)
        return view

    def leave(self, view: JobView) -> None:
        """``view``'s job has ended (its trials are all collected)."""
        with self._state:
            if view in self._views:
                self._views.remove(view)
                for class_key in view.satisfied:  # a user, if maybe never a submitter
                    flying = self._users_flying.get(class_key, 0) - view.flying.get(class_key, 0)
                    self._users_flying[class_key] = flying
                    self._joins[class_key] += 1
                    self._satisfied[class_key].discard(view)

    # ----- for the views (``_state`` held where noted)
    def _allowance(self, asker: JobView, class_key: str, free: int) -> int:
        """``asker``'s fair share of ``class_key``'s slots (``_state`` held): from the class's
        kept split if the asker wants more and the split still holds, else computed afresh."""
        capacity = free + self._users_flying.get(class_key, 0)
        wanting = asker.satisfied.get(class_key) is False
        if not wanting:
            return self._split(asker, class_key, capacity)[asker]
        basis = (
            capacity,
            self._joins[class_key],
            frozenset((v, v.flying.get(class_key, 0)) for v in self._satisfied[class_key]),
        )
        kept = self._splits.get(class_key)
        if kept is None or kept[0] != basis:
            kept = basis, self._split(asker, class_key, capacity)
            self._splits[class_key] = kept
        return kept[1][asker]

    def _split(self, asker: JobView, class_key: str, capacity: int) -> dict[JobView, int]:
        """Each user's share of ``capacity`` slots of ``class_key``, max-min fair by team, then
        by job, the asker wanting more (``_state`` held)."""
        users = [v for v in self._views if v is asker or class_key in v.satisfied]
        demand = {
            v: math.inf
            if v is asker or not v.satisfied[class_key]
            else float(v.flying.get(class_key, 0))
            for v in users
        }
        teams: dict[str, list[JobView]] = {}
        for v in users:
            teams.setdefault(v.team, []).append(v)
        by_team = water_fill(capacity, {t: sum(demand[v] for v in vs) for t, vs in teams.items()})
        shares: dict[JobView, int] = {}
        for team, views in teams.items():
            split = water_fill(by_team[team], {v: demand[v] for v in views})
            shares.update({v: math.ceil(split[v] - 1e-9) for v in views})
        return shares

    def _free_slots(self, view: JobView, class_key: str) -> int:
        with self._pool_lock:
            free = self.pool.free_slots(class_key)
        with self._state:
            share = self._allowance(view, class_key, free)
            n = max(0, min(free, share - view.flying.get(class_key, 0)))
            self._set_satisfied(view, class_key, n > 0)  # reset by a submit: offered, not taken
            return n

    def _set_satisfied(self, view: JobView, class_key: str, satisfied: bool) -> None:
        """``_state`` held; the first call for a view and class makes the view a user."""
        if class_key not in view.satisfied:
            self._joins[class_key] = self._joins.get(class_key, 0) + 1
        view.satisfied[class_key] = satisfied
        users = self._satisfied.setdefault(class_key, set())
        if satisfied:
            users.add(view)
        else:
            users.discard(view)

    def _submit(
        self, view: JobView, class_key: str, request: TrialRequest, tag: object
    ) -> WorkerInfo:
        with self._pool_lock:
            info = self.pool.submit(class_key, request, _Tagged(view, tag))
        with self._state:
            view.flying[class_key] = view.flying.get(class_key, 0) + 1
            if view in self._views:
                self._users_flying[class_key] = self._users_flying.get(class_key, 0) + 1
            self._set_satisfied(view, class_key, False)
        return info

    def _wait(self, view: JobView, timeout: float) -> list[Done]:
        """``view``'s results within ``timeout``: collected by this call (which then routes the
        other views' too, until its own come or its time is up) or by whichever call collects."""
        deadline = time.monotonic() + timeout
        with self._state:
            while self._collecting and not view.routed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._state.wait(left)
            if view.routed or self._collecting:
                return self._take(view)
            self._collecting = True
        try:
            while True:
                alone = len(self._views) <= 1
                left = max(0.0, deadline - time.monotonic())
                with self._pool_lock:
                    done = self.pool.wait(left if alone else 0.0)
                with self._state:
                    for d in done:
                        tagged = d.tag
                        assert isinstance(tagged, _Tagged)
                        owner, key = tagged.view, d.worker.class_key
                        owner.flying[key] = owner.flying.get(key, 0) - 1
                        if owner in self._views:
                            self._users_flying[key] -= 1
                        owner.routed.append(dataclasses.replace(d, tag=tagged.tag))
                    if done:
                        self._state.notify_all()
                    if view.routed or time.monotonic() >= deadline:
                        break
                if not done and not alone:
                    time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        finally:
            with self._state:
                self._collecting = False
                self._state.notify_all()  # another waiting view takes over collecting
        with self._state:
            return self._take(view)

    @staticmethod
    def _take(view: JobView) -> list[Done]:
        """``view``'s routed results, handed to its driver (``_state`` held)."""
        out, view.routed = view.routed, []
        view.returned += len(out)
        return out


class JobView:
    """One job's :class:`~orchestrator.run.pool.Pool` on a :class:`SharedPool`."""

    def __init__(self, shared: SharedPool, job_id: int, team: str) -> None:
        self.shared, self.job_id, self.team = shared, job_id, team
        self.flying: dict[str, int] = {}  # class -> submitted, not yet collected from the pool
        self.satisfied: dict[str, bool] = {}  # class -> offered a slot and took none
        self.routed: list[Done] = []  # collected, not yet handed to the driver
        self.submitted = self.returned = 0

    def classes(self) -> dict[str, WorkerInfo]:
        return self.shared.pool.classes()

    def workers(self, class_key: str | None = None) -> list[WorkerInfo]:
        return self.shared.pool.workers(class_key)

    def free_slots(self, class_key: str) -> int:
        return self.shared._free_slots(self, class_key)

    @property
    def in_flight(self) -> int:
        return self.submitted - self.returned

    def submit(self, class_key: str, request: TrialRequest, tag: object) -> WorkerInfo:
        info = self.shared._submit(self, class_key, request, tag)
        self.submitted += 1
        return info

    def wait(self, timeout: float) -> list[Done]:
        return self.shared._wait(self, timeout)

    def retime(
        self, jobs: Sequence[RetimeJob], rounds: int, timeout_s: float = 600.0
    ) -> list[list[list[float]] | None]:
        # Not under the pool lock: re-timing can take minutes, and reads no state that
        # submit and wait change.
        return self.shared.pool.retime(jobs, rounds, timeout_s)

    def shutdown(self, grace_s: float = 10.0) -> None:
        """Nothing: the scheduler owns the pool (see :meth:`SharedPool.leave`)."""

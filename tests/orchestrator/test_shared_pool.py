"""The scheduler's shared class pool: max-min fair shares by team then job, slots a satisfied job
leaves go to the others, each job gets back exactly its own results."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from orchestrator.run.local_pool import LocalPool
from orchestrator.run.pool import Done, RetimeJob, WorkerInfo
from orchestrator.server.shared_pool import JobView, SharedPool, water_fill
from workers.measurement import Measurement, Outcome
from workers.trial import TrialRequest


class FakePool:
    """``slots`` slots of one class; ``finish`` makes the oldest ``n`` submissions done."""

    def __init__(self, info: WorkerInfo, slots: int) -> None:
        self.info, self.slots = info, slots
        self.flying: list[tuple[TrialRequest, object]] = []
        self.ready: list[Done] = []

    def classes(self) -> dict[str, WorkerInfo]:
        return {self.info.class_key: self.info}

    def workers(self, class_key: str | None = None) -> list[WorkerInfo]:
        return [self.info]

    def free_slots(self, class_key: str) -> int:
        return self.slots - len(self.flying) - len(self.ready)

    @property
    def in_flight(self) -> int:
        return len(self.flying) + len(self.ready)

    def submit(self, class_key: str, request: TrialRequest, tag: object) -> WorkerInfo:
        self.flying.append((request, tag))
        return self.info

    def finish(self, n: int) -> None:
        for request, tag in self.flying[:n]:
            self.ready.append(Done(request, tag, Measurement(Outcome.OK), self.info))
        del self.flying[:n]

    def wait(self, timeout: float) -> list[Done]:
        out, self.ready = self.ready, []
        return out

    def retime(
        self, jobs: list[RetimeJob], rounds: int, timeout_s: float = 600.0
    ) -> list[list[list[float]] | None]:
        return [None] * len(jobs)

    def shutdown(self, grace_s: float = 10.0) -> None:
        return None


@pytest.fixture
def fake_pool_info(h200_pool: LocalPool) -> WorkerInfo:
    """A worker's description (the pools here fake the workers themselves)."""
    return next(iter(h200_pool.classes().values()))


def fill(view: Any, tag: str) -> int:
    """Submit until the view offers no slot (a job that always wants more); how many."""
    n = 0
    key = view.classes().popitem()[0]
    while view.free_slots(key) > 0:
        view.submit(key, TrialRequest("k", {}, {"n": n}), tag)
        n += 1
    return n


def test_water_fill_is_max_min_fair() -> None:
    assert water_fill(12, {"a": math.inf, "b": math.inf, "c": 2}) == {"a": 5, "b": 5, "c": 2}
    assert water_fill(9, {"a": math.inf}) == {"a": 9}


def test_slots_split_by_team_then_job_and_results_go_home(fake_pool_info: WorkerInfo) -> None:
    pool = FakePool(fake_pool_info, slots=12)
    shared = SharedPool(pool)
    a1, a2, a3 = (shared.view(i, "a") for i in (1, 2, 3))
    b = shared.view(4, "b")
    got = {v.job_id: fill(v, str(v.job_id)) for v in (a1, a2, a3, b)}
    assert got == {1: 12, 2: 0, 3: 0, 4: 0}  # the first to ask had the class to itself
    # Its trials end; as the slots free, each job is topped up to its fair share only.
    pool.finish(12)
    for v in (a1, a2, a3, b):
        done = v.wait(0.0)
        assert [d.tag for d in done] == [str(v.job_id)] * got[v.job_id] and v.in_flight == 0
    got = {v.job_id: fill(v, str(v.job_id)) for v in (b, a1, a2, a3)}
    assert got == {4: 6, 1: 2, 2: 2, 3: 2}  # team b half, team a's three jobs a third of half


def test_a_satisfied_job_leaves_its_share_to_the_others(fake_pool_info: WorkerInfo) -> None:
    pool = FakePool(fake_pool_info, slots=10)
    shared = SharedPool(pool)
    busy, idle = shared.view(1, "a"), shared.view(2, "b")
    assert (
        idle.free_slots(fake_pool_info.class_key) == 10
    )  # offered, and it submits nothing: satisfied
    assert fill(busy, "busy") == 10  # the whole class, since b wants none
    pool.finish(10)
    busy.wait(0.0)
    assert idle.free_slots(fake_pool_info.class_key) == 5  # asking again: its share is back at once
    idle.submit(fake_pool_info.class_key, TrialRequest("k", {}, {}), "idle")
    assert fill(busy, "busy") == 5
    shared.leave(idle)
    pool.finish(10)
    assert len(busy.wait(0.0)) == 5


def test_a_job_that_asked_and_never_submitted_leaves_cleanly(fake_pool_info: WorkerInfo) -> None:
    # The first user of a class asks, submits nothing (its studies wanted none) and leaves:
    # no trial of that class was ever in flight on the pool. Its thread must end cleanly (the
    # scheduler releases the job's lease after ``leave``) and the next job gets every slot.
    pool = FakePool(fake_pool_info, slots=6)
    shared = SharedPool(pool)
    first = shared.view(1, "a")
    assert first.free_slots(fake_pool_info.class_key) == 6
    shared.leave(first)
    assert fill(shared.view(2, "b"), "next") == 6


def _fresh_share(shared: SharedPool, asker: JobView, class_key: str, free: int) -> int:
    """The fair share split anew, nothing kept: capacity from every user's flight read now."""
    users = [v for v in shared._views if v is asker or class_key in v.satisfied]
    capacity = free + sum(v.flying.get(class_key, 0) for v in users)
    return SharedPool._split(shared, asker, class_key, capacity)[asker]  # not counted


class _CheckedPool(SharedPool):
    """Checks every share against the one computed from nothing kept; counts the splits."""

    splits = 0

    def _allowance(self, asker: JobView, class_key: str, free: int) -> int:
        share = super()._allowance(asker, class_key, free)
        assert share == _fresh_share(self, asker, class_key, free)
        return share

    def _split(self, asker: JobView, class_key: str, capacity: int) -> dict[JobView, int]:
        self.splits += 1
        return super()._split(asker, class_key, capacity)


@pytest.mark.parametrize("seed", range(6))
def test_kept_split_matches_a_fresh_one(fake_pool_info: WorkerInfo, seed: int) -> None:
    # Jobs join, ask, take some or none of what they are offered, get results back and leave
    # in random order; each share must be what a split computed afresh gives.
    rng = random.Random(seed)
    key = fake_pool_info.class_key
    pool = FakePool(fake_pool_info, slots=rng.choice((7, 24, 60)))
    shared = _CheckedPool(pool)
    views = [shared.view(i, f"team{i % 3}") for i in range(5)]
    queries = 0
    for step in range(600):
        op = rng.random()
        if op < 0.02 and len(views) < 9:
            views.append(shared.view(100 + step, f"team{rng.randrange(4)}"))
        elif op < 0.04 and views:
            gone = views.pop(rng.randrange(len(views)))
            gone.wait(0.0)
            shared.leave(gone)
        elif op < 0.25:
            pool.finish(rng.randrange(1, 6))
            if views:
                rng.choice(views).wait(0.0)
        elif views:
            view = rng.choice(views)
            takes = rng.random() < 0.8  # else offered and takes none: satisfied
            for _ in range(rng.randrange(1, 8)):
                queries += 1
                if view.free_slots(key) == 0 or not takes:
                    break
                view.submit(key, TrialRequest("k", {}, {"step": step}), view.job_id)
    assert shared.splits < queries / 2  # most queries read the kept split

"""The API's caches: one computation however many threads ask, the old value while a refresh runs,
and best-config answers that follow the table."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from db import Database
from orchestrator.server.cache import BestCache, Recent
from tests.server.conftest import MATMUL_PROBLEMS, seed_best


@pytest.fixture
def backend() -> str:
    return "sqlite"


def test_many_threads_one_computation_and_stale_while_refreshing() -> None:
    cache = Recent(ttl_s=0.2)
    calls: list[int] = []
    release = threading.Event()

    def compute() -> int:
        calls.append(1)
        release.wait(5)
        return len(calls)

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(cache.get, "k", compute) for _ in range(8)]
        time.sleep(0.1)
        release.set()
        assert {f.result() for f in futures} == {1} and len(calls) == 1
    assert cache.peek("k") == 1
    time.sleep(0.25)
    assert cache.peek("k") is None  # expired, nobody refreshing
    release.clear()
    with ThreadPoolExecutor(2) as pool:
        refresh = pool.submit(cache.get, "k", compute)
        time.sleep(0.1)
        assert cache.get("k", compute) == 1  # the old value while the refresh runs
        assert cache.peek("k") == 1
        release.set()
        assert refresh.result() == 2
    assert cache.peek("k") == 2
    cache.forget("k")
    assert cache.peek("k") is None


def test_a_failed_computation_leaves_nothing_behind() -> None:
    cache = Recent(ttl_s=10)

    def fail() -> int:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        cache.get("k", fail)
    assert cache.get("k", lambda: 3) == 3


def test_best_cache_follows_the_table(db: Database) -> None:
    cache = BestCache(db)
    seed_best(db, "alpha", MATMUL_PROBLEMS[:1])
    answers = iter(range(10))
    first = cache.version("matmul")
    assert first == (1, first[1]) and first[1] is not None
    assert cache.get("matmul", "key", first, lambda: next(answers)) == 0
    assert cache.get("matmul", "key", first, lambda: next(answers)) == 0
    assert cache.peek("matmul", "key", first) == 0
    seed_best(db, "beta", MATMUL_PROBLEMS[1:])
    second = cache.version("matmul")
    assert second[0] == 2 and cache.peek("matmul", "key", second) is None
    assert cache.get("matmul", "key", second, lambda: next(answers)) == 1
    assert cache.version("rmsnorm") == (0, None)

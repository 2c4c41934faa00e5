"""Answers the API keeps between requests, so many clients polling the same thing cost one query.

* :class:`BestCache`: values computed from a kernel's best configs (query answers, bundles), kept
  while the kernel's rows in ``tf_best_configs`` are unchanged: the row count and the newest
  ``updated_at`` (one indexed query, asked at most every :data:`VERSION_TTL_S`), so a config
  promoted by any server is served within that time (plus the time to recompute the answer).
* :class:`Recent`: values kept for a short time (a job's progress, polled by every watcher).

Both are bounded (oldest entries go first) and compute a value once however many requests want
it; while a stale value is being recomputed, the others get the stale one (no request waits for a
refresh that another already does). ``peek`` answers from memory only, so an async handler can serve a fresh value without
a thread hop and leave the rest to ``get`` in a worker thread.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from db import Database, repository

T = TypeVar("T")
MAX_ENTRIES = 256
VERSION_TTL_S = 0.25


class _Store(Generic[T]):
    """A bounded mapping of key -> (stamp, value). One thread computes a missing or stale value;
    meanwhile the others get the old value if there is one, else wait for the new one."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[Hashable, tuple[Any, T]] = OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[Hashable, threading.Event] = {}

    def peek(self, key: Hashable, fresh: Callable[[Any], bool]) -> T | None:
        """The value of ``key`` if it is fresh (or being recomputed), else None (values are
        never None)."""
        with self._lock:
            hit = self._items.get(key)
            busy = key in self._computing
        return hit[1] if hit is not None and (busy or fresh(hit[0])) else None

    def get(
        self, key: Hashable, fresh: Callable[[Any], bool], stamp: Any, compute: Callable[[], T]
    ) -> T:
        while True:
            with self._lock:
                hit = self._items.get(key)
                if hit is not None and fresh(hit[0]):
                    return hit[1]
                computing = self._computing.get(key)
                if computing is None:
                    computing = self._computing[key] = threading.Event()
                    break
                if hit is not None:
                    return hit[1]
            computing.wait()
        try:
            value = compute()
            with self._lock:
                self._items[key] = (stamp, value)
                self._items.move_to_end(key)
                while len(self._items) > self.max_entries:
                    self._items.popitem(last=False)
            return value
        finally:
            with self._lock:
                del self._computing[key]
            computing.set()

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._items.pop(key, None)


class Recent:
    """Values kept for ``ttl_s`` seconds after they were computed."""

    def __init__(self, ttl_s: float, max_entries: int = MAX_ENTRIES) -> None:
        self.ttl_s = ttl_s
        self._store: _Store[Any] = _Store(max_entries)

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        now = time.monotonic()
        return self._store.get(key, lambda at: now - at < self.ttl_s, now, compute)

    def peek(self, key: Hashable, max_age_s: float | None = None) -> Any:
        """The value of ``key`` if it is at most ``max_age_s`` (default: the ttl) old, else None;
        never waits or computes."""
        now = time.monotonic()
        age = self.ttl_s if max_age_s is None else max_age_s
        return self._store.peek(key, lambda at: now - at < age)

    def forget(self, key: Hashable) -> None:
        """Drop ``key`` (its value changed here)."""
        self._store.forget(key)


class BestCache:
    """Values derived from the best configs of one kernel, valid while those rows are unchanged.

    ``versions`` holds each kernel's :meth:`version` for :data:`VERSION_TTL_S`; a value is kept
    with the version it was computed at and is valid for that version only.
    """

    def __init__(self, database: Database, max_entries: int = MAX_ENTRIES) -> None:
        self.database = database
        self._store: _Store[Any] = _Store(max_entries)
        self.versions = Recent(VERSION_TTL_S, max_entries)

    def version(self, kernel: str) -> tuple[int, Any]:
        """(row count, newest update) of ``kernel``'s best configs: it changes with every write."""
        with self.database.session(readonly=True) as s:
            return repository.best_version(s, kernel)

    def peek(self, kernel: str, key: Hashable, version: tuple[int, Any]) -> Any:
        """The value of ``key`` computed at ``version``, else None (no query)."""
        return self._store.peek((kernel, key), lambda stamp: stamp == version)

    def get(
        self, kernel: str, key: Hashable, version: tuple[int, Any], compute: Callable[[], T]
    ) -> T:
        """The value of ``key`` at ``version``, computed if there is none."""
        return self._store.get((kernel, key), lambda stamp: stamp == version, version, compute)

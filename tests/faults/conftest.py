"""Fixtures of the fault suite (databases of both backends and the synthetic replay landscapes come
from tests/conftest.py): :class:`FaultPool`, a real pool with a fault injected at the n-th result;
``make_landscapes`` importable for the scenarios that build a landscape of their own."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orchestrator.run.pool import Done, RetimeJob, WorkerInfo
from workers.trial import TrialRequest

sys.path.insert(0, str(Path(__file__).parents[1] / "orchestrator" / "landscapes"))

H200 = "NVIDIA H200"
MATMUL_SMALL = {"M": 256, "N": 256, "K": 256, "dtype": "float16"}


#: Called with each result and its number (from 1); returns the result the driver sees.
Fault = Callable[[Done, int], Done]


class FaultPool:
    """A :class:`orchestrator.run.pool.Pool` that passes every call to ``inner`` and lets ``fault``
    see (and change) each config trial's result before the driver does; ``seen`` counts them (a
    vendor path's measurement passes untouched and uncounted)."""

    def __init__(self, inner: Any, fault: Fault) -> None:
        self.inner, self.fault, self.seen = inner, fault, 0

    def classes(self) -> dict[str, WorkerInfo]:
        return dict(self.inner.classes())

    def workers(self, class_key: str | None = None) -> list[WorkerInfo]:
        return list(self.inner.workers(class_key))

    def free_slots(self, class_key: str) -> int:
        return int(self.inner.free_slots(class_key))

    @property
    def in_flight(self) -> int:
        return int(self.inner.in_flight)

    def submit(self, class_key: str, request: TrialRequest, tag: object) -> WorkerInfo:
        info: WorkerInfo = self.inner.submit(class_key, request, tag)
        return info

    def wait(self, timeout: float) -> list[Done]:
        out = []
        for done in self.inner.wait(timeout):
            if done.request.vendor is not None:
                out.append(done)
                continue
            self.seen += 1
            out.append(self.fault(done, self.seen))
        return out

    def retime(
        self, jobs: Sequence[RetimeJob], rounds: int, timeout_s: float = 600.0
    ) -> list[list[list[float]] | None]:
        return list(self.inner.retime(jobs, rounds, timeout_s))

    def shutdown(self, grace_s: float = 10.0) -> None:
        self.inner.shutdown(grace_s)

"""Body of one writer process in the concurrent best-config test (importable by spawned children)."""

from __future__ import annotations

from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

from db import Database
from db.repository import get_best, upsert_best

KEY: dict[str, Any] = {
    "kernel_name": "matmul",
    "kernel_version": "v1",
    "problem_key": '{"M":64}',
    "device_class_key": "NVIDIA H200",
    "triton_minor": "3.6",
}


def hammer(url: str, worker: int, times: list[float], start: Barrier, out: Queue) -> None:
    """Upsert each of ``times`` for KEY, one transaction each, then read the stored time back.

    Puts ``(worker, [(time, returned, stored time read after it), ...])`` on ``out``.
    """
    database = Database(url)
    results = []
    start.wait()
    for t in times:
        with database.session() as s:
            stored = upsert_best(
                s,
                **KEY,
                config={"t": t, "worker": worker},
                time_ms=t,
                trial_id=None,
                job_id=None,
                environment_id=None,
            )
        with database.session(readonly=True) as s:
            (best,) = get_best(s, KEY["kernel_name"])
        results.append((t, stored, best.time_ms))
    database.close()
    out.put((worker, results))

"""Body of one writer process in the concurrent best-config test (importable by spawned children)."""

from __future__ import annotations

from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

from db import Database, Session
from db.repository import ensure_device_class, get_best, upsert_best

#: The device class of the best-config key the tests write.
CLASS_KEY = "NVIDIA H200"
#: That key but its device class (see :func:`best_key`).
KEY: dict[str, Any] = {
    "kernel_name": "matmul",
    "kernel_version": "v1",
    "problem_key": '{"M":64}',
    "triton_minor": "3.6",
}


def best_key(s: Session) -> dict[str, Any]:
    """KEY with the id of its device class, CLASS_KEY (created if new)."""
    class_id = ensure_device_class(s, CLASS_KEY, "nvidia", CLASS_KEY, "sm_90")
    return {**KEY, "device_class_id": class_id}


def hammer(url: str, worker: int, times: list[float], start: Barrier, out: Queue) -> None:
    """Upsert each of ``times`` for KEY, one transaction each, then read the stored time back.

    Puts ``(worker, [(time, returned, stored time read after it), ...])`` on ``out``.
    """
    database = Database(url)
    results = []
    with database.session() as s:
        key = best_key(s)
    start.wait()
    for t in times:
        with database.session() as s:
            stored = upsert_best(
                s,
                **key,
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

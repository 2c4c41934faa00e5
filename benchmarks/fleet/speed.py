"""How fast the machine runs Python during a run: a fixed piece of work timed by its own thread's
CPU clock. Waiting for the GIL or for a core costs no CPU time, so the figure moves only with the
speed each CPU second delivers (the host's clock, caches, memory bandwidth, neighbours), which
differs between runs on a shared host by as much as the runs' CPU per trial does."""

from __future__ import annotations

import json
import statistics
import threading
import time

#: Repetitions of the fixed work per measurement (about 1 ms of CPU on the 2-core CI machine).
REPS = 40


def work_cpu_us() -> float:
    """CPU microseconds of this thread for the fixed work: dict and list operations, a sort and a
    small JSON dump, the kind of Python a driver runs per trial."""
    t0 = time.thread_time()
    for rep in range(REPS):
        table = {f"k{i}": i * rep for i in range(200)}
        values = sorted(table.values(), reverse=True)
        json.dumps({"values": values[:50], "rep": rep}, sort_keys=True)
    return (time.thread_time() - t0) * 1e6


def idle_us(samples: int = 15) -> float:
    """Median of ``samples`` measurements taken now, back to back."""
    return statistics.median(work_cpu_us() for _ in range(samples))


class SpeedProbe:
    """Measures :func:`work_cpu_us` every ``interval_s`` in a thread of its own until stopped."""

    def __init__(self, interval_s: float = 2.0) -> None:
        self.interval_s = interval_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="speed-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def median_us(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append(work_cpu_us())

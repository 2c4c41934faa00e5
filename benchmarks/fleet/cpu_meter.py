"""CPU seconds by component over a run, sampled from ``/proc`` (Linux).

A :class:`CpuMeter` calls its probe every ``interval_s``: the probe returns, per component, the
cumulative CPU seconds (user + system) of each thing alive now (a process, a thread), keyed by
anything stable for that thing's life. The meter keeps each thing's latest value (so one that
ended still counts what it used until its last sample) and records the component totals with
their ``time.monotonic()``; :func:`window` gives what each component used between two times.
A thing that started before the meter's first sample counts from its first sample; one that
started later counts from zero.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")

#: ``component -> {thing: cumulative CPU seconds}`` for the things alive now.
Probe = Callable[[], Mapping[str, Mapping[Hashable, float]]]
#: ``(time.monotonic(), {component: cumulative CPU seconds})``, oldest first.
Sample = tuple[float, dict[str, float]]


def stat_cpu_s(path: str | Path) -> float | None:
    """User + system CPU seconds from a ``/proc/<pid>/stat`` or ``/proc/<pid>/task/<tid>/stat``
    file; None if it is gone."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime (fields 14, 15)


def machine_cpu_s() -> tuple[float, float]:
    """CPU seconds every core of the machine spent busy (not idle, not waiting for I/O), the time
    the hypervisor gave to other guests included, and that time (steal) alone; one read."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:9]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields)
    return (user + nice + system + irq + softirq + steal) * TICK_S, steal * TICK_S


def threads_by_role(role: Callable[[str], str]) -> dict[str, dict[Hashable, float]]:
    """This process's live Python threads' CPU seconds grouped by ``role(thread name)``, keyed
    by (native id, name)."""
    out: dict[str, dict[Hashable, float]] = {}
    for thread in threading.enumerate():
        tid = thread.native_id
        if tid is None:
            continue
        cpu = stat_cpu_s(f"/proc/self/task/{tid}/stat")
        if cpu is not None:
            out.setdefault(role(thread.name), {})[(tid, thread.name)] = cpu
    return out


class CpuMeter:
    """Samples ``probe`` every ``interval_s`` in a daemon thread; see the module docstring."""

    def __init__(self, probe: Probe, interval_s: float = 0.5) -> None:
        self._probe = probe
        self.interval_s = interval_s
        self._latest: dict[str, dict[Hashable, float]] = {}
        self.samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """Take one sample now."""
        found = self._probe()
        with self._lock:
            for component, things in found.items():
                self._latest.setdefault(component, {}).update(things)
            totals = {c: sum(things.values()) for c, things in self._latest.items()}
            self.samples.append((time.monotonic(), totals))

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def series(self) -> list[Sample]:
        with self._lock:
            return list(self.samples)


def window(samples: list[Sample], start: float, end: float) -> tuple[float, dict[str, float]]:
    """``(seconds, {component: CPU seconds})`` from the last sample at or before ``start``
    (else the first) to the first sample at or after ``end`` (else the last)."""
    if not samples:
        return 0.0, {}
    before = [s for s in samples if s[0] <= start] or samples[:1]
    after = [s for s in samples if s[0] >= end] or samples[-1:]
    (ta, a), (tb, b) = before[-1], after[0]
    return round(tb - ta, 3), {c: round(b[c] - a.get(c, 0.0), 3) for c in sorted(b)}

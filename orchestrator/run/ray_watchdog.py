"""Watchdog of a local Ray that a driver started: once the driver is gone, end that Ray's processes.

A driver killed with SIGKILL cannot stop its Ray; Ray's GCS and raylet die with it (their parent),
but the raylet's dashboard and runtime-env agents, its workers and their trial processes linger
up to a minute (Ray's own timeout). :func:`start` (called by ``ensure_ray`` right after it started
a local Ray) spawns this file as a separate process in its own session; it runs on the standard
library alone (``python -I``: nothing of ours, no site packages).

Contract of the watchdog process: every ``POLL_S`` it looks at the raylet, then at the driver.
Raylet gone while the driver still lives ``CLEAN_S`` later: the driver shut Ray down itself (a
clean exit), so the watchdog exits touching nothing. Driver gone (or a zombie): it sends SIGKILL to this Ray's
processes only, for up to ``KILL_WINDOW_S``, until none is left, then exits. "This Ray's" means
the pids ``ray.init`` reported and the driver's descendants as last seen while it lived (a
snapshot every ``SNAPSHOT_EVERY`` polls: the raylet's agents and workers, whose parent dies with
the driver), each checked against its start time so that a reused pid is never hit; the
processes whose environment names this Ray's raylet (``RAY_RAYLET_PID``, which Ray sets for its
workers and their children inherit; an agent's title may overwrite it); and the descendants of
all these. Another user's or another driver's Ray is never touched: its processes have another
raylet pid and are not descendants of ours.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Seconds between looks at the raylet and the driver.
POLL_S = 0.25
#: Polls between two snapshots of the driver's descendants.
SNAPSHOT_EVERY = 4
#: Seconds a driver outlives its raylet when it shut Ray down itself.
CLEAN_S = 2.0
#: Seconds the watchdog keeps killing once the driver is gone (new children of dying workers).
KILL_WINDOW_S = 10.0
PROC = Path("/proc")


@dataclass(frozen=True)
class Proc:
    """A process as /proc shows it: pid, parent, start time (clock ticks since boot), state."""

    pid: int
    ppid: int
    start: int
    state: str


def read(pid: int) -> Proc | None:
    """The process ``pid``, or None if there is none (or it cannot be read)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return Proc(pid, int(fields[1]), int(fields[19]), fields[0])


def alive(pid: int, start: int) -> bool:
    """True if process ``pid`` with start time ``start`` exists and is not a zombie."""
    proc = read(pid)
    return proc is not None and proc.start == start and proc.state not in ("Z", "X")


def _all() -> list[Proc]:
    out = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            proc = read(int(entry.name))
            if proc is not None and proc.state not in ("Z", "X"):
                out.append(proc)
    return out


def _names_raylet(pid: int, raylet: int) -> bool:
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:  # another user's process, or gone
        return False
    return f"RAY_RAYLET_PID={raylet}".encode() in environ.split(b"\0")


def _descendants(roots: Iterable[int], procs: Sequence[Proc]) -> set[int]:
    """``roots`` and all their descendants among ``procs`` (never this process)."""
    children: dict[int, list[int]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p.pid)
    found = set(roots)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found and child != os.getpid():
                found.add(child)
                stack.append(child)
    return found


def snapshot(driver: int) -> set[tuple[int, int]]:
    """(pid, start time) of every live descendant of ``driver``."""
    procs = _all()
    starts = {p.pid: p.start for p in procs}
    return {(pid, starts[pid]) for pid in _descendants([driver], procs) - {driver}}


def targets(known: Iterable[tuple[int, int]], raylet: int) -> set[int]:
    """Pids of this Ray's live processes: ``known`` (pid, start time) pairs still alive, those
    whose environment names ``raylet``, and all their descendants."""
    procs = _all()
    starts = {p.pid: p.start for p in procs}
    found = {pid for pid, start in known if starts.get(pid) == start}
    found |= {p.pid for p in procs if p.pid != os.getpid() and _names_raylet(p.pid, raylet)}
    return _descendants(found, procs)


def watch(
    driver: tuple[int, int], raylet: tuple[int, int], known: Sequence[tuple[int, int]]
) -> int:
    """Run the contract of the module doc; how many processes were killed."""
    seen = set(known)
    polls = 0
    while alive(*driver):
        if polls % SNAPSHOT_EVERY == 0:
            seen |= snapshot(driver[0])
        polls += 1
        if not alive(*raylet):
            # A killed driver takes its raylet along (and shows dead within a moment): the
            # driver must outlive its raylet by CLEAN_S for this to be its own shutdown.
            time.sleep(CLEAN_S)
            if alive(*driver):
                return 0
            break
        time.sleep(POLL_S)
    killed: set[int] = set()
    deadline = time.monotonic() + KILL_WINDOW_S
    while time.monotonic() < deadline:
        left = targets(seen, raylet[0])
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:  # gone meanwhile
                pass
        time.sleep(POLL_S)
    return len(killed)


def _pair(text: str) -> tuple[int, int]:
    pid, start = text.split(":")
    return int(pid), int(start)


def start(driver_pid: int, raylet_pid: int, pids: Sequence[int]) -> bool:
    """Spawn the watchdog of the Ray whose raylet is ``raylet_pid`` and whose other processes
    ``ray.init`` reported as ``pids``, for driver ``driver_pid``; False if the driver or the
    raylet is gone already or the process could not start."""
    driver, raylet = read(driver_pid), read(raylet_pid)
    if driver is None or raylet is None:
        return False
    found = [driver, raylet, *(p for p in map(read, pids) if p is not None)]
    args = [f"{p.pid}:{p.start}" for p in found]
    try:
        # Double fork: the intermediate exits at once (reaped here), the watchdog is reparented.
        subprocess.run(
            [sys.executable, "-I", __file__, "daemon", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd="/",
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def main(argv: Sequence[str]) -> None:
    """``ray_watchdog.py [daemon] DRIVER:START RAYLET:START [PID:START ...]``."""
    if argv and argv[0] == "daemon":
        if os.fork():
            os._exit(0)
        argv = argv[1:]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pairs = [_pair(a) for a in argv]
    watch(pairs[0], pairs[1], pairs[1:])


if __name__ == "__main__":
    main(sys.argv[1:])

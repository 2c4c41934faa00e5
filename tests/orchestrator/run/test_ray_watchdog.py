"""The watchdog of a local Ray (orchestrator/run/ray_watchdog.py) on stand-in processes: a
"driver" (a shell with a child), a "raylet" and a bystander, all ``sleep``s. The real Ray case is
tests/faults/test_kill_faults.py."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from orchestrator.run import ray_watchdog
from orchestrator.run.ray_watchdog import read

WATCHDOG = [sys.executable, "-I", ray_watchdog.__file__]


def _pair(pid: int) -> str:
    proc = read(pid)
    assert proc is not None
    return f"{pid}:{proc.start}"


def _alive(pid: int) -> bool:
    proc = read(pid)
    return proc is not None and proc.state not in ("Z", "X")


@pytest.fixture
def stand_ins() -> Iterator[tuple[subprocess.Popen[str], int, subprocess.Popen[str], int]]:
    """The driver (its child's pid printed first), the driver's child, the raylet, a bystander."""
    driver = subprocess.Popen(
        ["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE, text=True
    )
    assert driver.stdout is not None
    child = int(driver.stdout.readline())
    raylet = subprocess.Popen(["sleep", "300"])
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        yield driver, child, raylet, bystander.pid
    finally:
        for proc in (driver, raylet, bystander):
            proc.kill()
            proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def _watch(driver: int, raylet: int) -> subprocess.Popen[str]:
    watchdog = subprocess.Popen([*WATCHDOG, _pair(driver), _pair(raylet)], text=True)
    time.sleep(ray_watchdog.POLL_S * (ray_watchdog.SNAPSHOT_EVERY + 2))  # one snapshot taken
    return watchdog


def test_a_dead_driver_takes_its_ray_and_children_along_never_a_bystander(
    stand_ins: tuple[subprocess.Popen[str], int, subprocess.Popen[str], int],
) -> None:
    driver, child, raylet, bystander = stand_ins
    watchdog = _watch(driver.pid, raylet.pid)
    driver.send_signal(signal.SIGKILL)
    assert watchdog.wait(timeout=ray_watchdog.KILL_WINDOW_S + 5) == 0
    raylet.wait(timeout=5)
    assert raylet.returncode == -signal.SIGKILL
    assert not _alive(child)  # reparented to init: found by the snapshot
    assert _alive(bystander)


def test_a_ray_shut_down_by_its_living_driver_stops_the_watchdog_touching_nothing(
    stand_ins: tuple[subprocess.Popen[str], int, subprocess.Popen[str], int],
) -> None:
    driver, child, raylet, bystander = stand_ins
    watchdog = _watch(driver.pid, raylet.pid)
    raylet.terminate()
    raylet.wait()
    assert watchdog.wait(timeout=ray_watchdog.CLEAN_S + 5) == 0
    assert _alive(driver.pid) and _alive(child) and _alive(bystander)


def test_start_refuses_a_raylet_that_is_gone() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert not ray_watchdog.start(os.getpid(), gone.pid, [])

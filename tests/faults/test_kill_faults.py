"""A ``tunefleet tune`` driver killed with SIGKILL mid-job (subprocesses, real Ray): the local Ray
it started ends within seconds (its watchdog, orchestrator.run.ray_watchdog), not after Ray's own
minute; a driver attached to a running cluster (``--ray-address``) leaves that cluster running.
The driver runs in a session of its own, so every process it started, directly or through Ray's
raylet, carries that session id: what is left of the driver is what still carries it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from db import Database, repository
from tests.workers.fake_specs import CRASHED_ENV, RELEASE_ENV, ref

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from orchestrator.commands.cli import main; main()"]
TUNE = ["tune", ref("CrashOnceThenWaitSpec"), "-p", "N=40", "--device", "interpreter"]
#: Seconds the tune may take to start (a busy 2-core machine).
START_S = 180
#: The test cluster's environment, and its attached driver's: no token (another test's Ray may
#: rewrite the user's shared token file meanwhile), and the cluster's node address (127.0.0.1,
#: which a driver outside single-machine mode would swap for the host's address).
ATTACHED = {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
#: Seconds within which a killed driver's Ray must be gone (Ray's own timeout is about 60).
GONE_S = 10.0


def _in_session(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@contextlib.contextmanager
def _tune_until_a_trial_waits(
    tmp_path: Path, *extra: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    """Start the tune in a session of its own and yield it once its first trial (a crash) is
    recorded and its re-measurement waits; SIGKILL to its whole session at the end."""
    url = f"sqlite:///{tmp_path / 'tf.db'}"
    database = Database(url)
    database.ensure_schema()
    env = {
        **os.environ,
        **(env or {}),
        CRASHED_ENV: str(tmp_path / "crashed"),
        RELEASE_ENV: str(tmp_path / "release"),  # never written: the trial waits
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [*CLI, *TUNE, "--trials", "1", "--db", url, *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_S
        while not _has_a_trial(database):
            if proc.poll() is not None:
                assert proc.stderr is not None
                raise AssertionError(f"tune exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
            if time.monotonic() > deadline:
                os.kill(proc.pid, signal.SIGKILL)
                assert proc.stderr is not None
                raise AssertionError(f"no trial row in time: {proc.stderr.read()[-2000:]}")
            time.sleep(0.2)
        time.sleep(1.0)  # the re-measurement's trial process has started
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _has_a_trial(database: Database) -> bool:
    with database.session(readonly=True) as s:
        return any(
            repository.trials_for_study(s, study.id)
            for job in repository.list_jobs(s)
            for study in repository.studies_for_job(s, job.id)
        )


def _gone_within(sid: int, seconds: float) -> list[int]:
    """Wait until session ``sid`` has no live process, up to ``seconds``; what is left."""
    deadline = time.monotonic() + seconds
    left = _in_session(sid)
    while left and time.monotonic() < deadline:
        time.sleep(0.25)
        left = _in_session(sid)
    return left


def test_a_killed_driver_leaves_no_process_of_its_ray(tmp_path: Path) -> None:
    with _tune_until_a_trial_waits(tmp_path) as proc:
        before = _in_session(proc.pid)
        assert len(before) >= 5, before  # the driver, GCS, raylet, agents, a worker, a trial
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        left = _gone_within(proc.pid, GONE_S)
        assert proc.stderr is not None
        assert not left, (left, proc.stderr.read()[-3000:])
        print(f"the driver's Ray was gone {time.monotonic() - killed:.1f} s after the kill")


@pytest.fixture
def cluster() -> Iterator[tuple[subprocess.Popen[str], str, list[int]]]:
    """A running local Ray of another process (tests/faults/_ray_head.py): the process, its
    address and the pids ``ray.init`` reported there."""
    head = subprocess.Popen(
        [sys.executable, "-m", "tests.faults._ray_head"],
        cwd=ROOT,
        env={**os.environ, **ATTACHED, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert head.stdout is not None
    try:
        address = head.stdout.readline().split()[1]
        pids = [int(p) for p in head.stdout.readline().split()[1:]]
        yield head, address, pids
    finally:
        head.kill()  # its own watchdog ends its Ray
        head.wait()
        assert not _gone_within(head.pid, GONE_S)


def _ping(head: subprocess.Popen[str]) -> str:
    assert head.stdin is not None and head.stdout is not None
    head.stdin.write("ping\n")
    head.stdin.flush()
    return head.stdout.readline().strip()


def test_a_killed_driver_attached_to_a_cluster_leaves_the_cluster_running(
    tmp_path: Path, cluster: tuple[subprocess.Popen[str], str, list[int]]
) -> None:
    head, address, pids = cluster
    assert _ping(head) == "ok 0"
    with _tune_until_a_trial_waits(tmp_path, "--ray-address", address, env=ATTACHED) as proc:
        os.kill(proc.pid, signal.SIGKILL)
        time.sleep(GONE_S)
        assert all(_alive(pid) for pid in pids), [p for p in pids if not _alive(p)]
        assert _ping(head) == "ok 1"  # the cluster still runs tasks

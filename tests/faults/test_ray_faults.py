"""Faults on real Ray (one local Ray for the module, replay workers): the local Ray listens on
loopback only, a one-worker job whose configs keep crashing goes on on a fresh actor and promotes,
and stopping kept workers leaves another owner's alone. A killed Ray actor mid-job is
tests/orchestrator/run/test_cluster.py::test_killed_worker_loses_nothing_and_job_completes."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from make_landscapes import synthetic

from db import Database, JobStatus, TrialOutcome, repository
from orchestrator.run.dispatch import WorkerPool, ensure_ray, stop_kept_workers
from orchestrator.run.driver import Driver, submit_job
from orchestrator.run.jobs import JobSpec
from orchestrator.run.worker import PoolOptions, WorkerPlan
from tests.faults.checker import assert_held
from tests.faults.conftest import H200, MATMUL_SMALL
from workers.landscape import LandscapeResult, write_landscape
from workers.measurement import Outcome


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    started = ensure_ray(None, 2)
    yield
    if started:
        ray.shutdown()


def _listening() -> dict[str, str]:
    """Socket inode -> local address (hex, as /proc/net/tcp{,6} write it) of listening sockets."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                out[fields[9]] = fields[1].rsplit(":", 1)[0]
    return out


LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def test_the_local_ray_listens_on_loopback_only(local_ray: None) -> None:
    """Item 8: the node and the GCS report 127.0.0.1, and every socket that the processes of
    this Ray (its session's raylet, GCS, agents, workers) listen on is a loopback one."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    assert nodes and {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    node = ray._private.worker._global_node
    assert node is not None
    session = Path(node.get_session_dir_path()).name
    sockets = _listening()
    seen = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            environ = (proc / "environ").read_bytes() + (proc / "cmdline").read_bytes()
            fds = [os.readlink(fd) for fd in (proc / "fd").iterdir()]
        except OSError:
            continue
        if session.encode() not in environ and proc.name != str(os.getpid()):
            continue
        for fd in fds:
            if fd.startswith("socket:[") and fd[8:-1] in sockets:
                seen += 1
                assert sockets[fd[8:-1]] in LOOPBACK, (proc.name, sockets[fd[8:-1]])
    assert seen


@pytest.fixture
def crashing(tmp_path: Path) -> Path:
    """The H200 landscape of the small matmul with every other recorded config a crash."""
    land = synthetic(H200, MATMUL_SMALL)
    results = [
        LandscapeResult(r.config, Outcome.CRASH) if i % 2 and r.outcome is Outcome.OK else r
        for i, r in enumerate(land.results)
    ]
    return write_landscape(tmp_path / "crashing.json", dataclasses.replace(land, results=results))


def test_a_worker_retired_for_crashes_is_replaced_and_the_job_promotes(
    local_ray: None, crashing: Path, db: Database
) -> None:
    """Item 5: one worker retiring at each crash (max_crashes=1): a fresh actor takes its place
    every time, the job ends done and its fastest ok config is promoted."""
    pool = WorkerPool([WorkerPlan("replay", (str(crashing),))], PoolOptions(max_crashes=1))
    try:
        first = {w.pid for w in pool.workers()}
        spec = JobSpec.from_mapping({"kernel": "matmul", "problems": [MATMUL_SMALL], "trials": 8})
        result = Driver(db, pool, retime_rounds=1, poll_s=0.0).run(submit_job(db, spec, pool))
        assert result.status is JobStatus.DONE
        (winner,) = result.winners.values()
        assert winner.promoted
        with db.session(readonly=True) as s:
            (study,) = repository.studies_for_job(s, result.job_id)
            outcomes = [t.outcome for t in repository.trials_for_study(s, study.id)]
        assert TrialOutcome.CRASH in outcomes and TrialOutcome.OK in outcomes
        assert {w.pid for w in pool.workers()}.isdisjoint(first)  # the first actor was replaced
        assert_held(db, [result.job_id])
    finally:
        pool.shutdown()


def test_stopping_kept_workers_leaves_another_owners_running(
    local_ray: None, landscapes: dict[str, list[Path]]
) -> None:
    """Item 8: alice's `workers stop` ends alice's kept actor only; bob's still answers."""
    plan = WorkerPlan("replay", (str(landscapes[H200][0]),))  # one file: each actor loads it
    alice = WorkerPool([plan], PoolOptions(keep=True, owner="alice"))
    bob = WorkerPool([plan], PoolOptions(keep=True, owner="bob"))
    (bobs,) = bob.workers()
    alice.shutdown()
    bob.shutdown()
    try:
        assert stop_kept_workers(owner="alice") == 1
        assert ray.get(bob.actor(bobs.worker).info.remote(), timeout=30).pid == bobs.pid
    finally:
        assert stop_kept_workers(owner="bob") == 1

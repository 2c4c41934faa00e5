"""Kept workers: a real Ray head on loopback (``ray start``), two `tunefleet tune` jobs with
--keep-workers served by the same actor, then `tunefleet workers stop`."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ray_head

PROBLEMS = ("M=32,N=32,K=32,dtype=float16", "M=16,N=32,K=32,dtype=float16")
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def cluster_env() -> Iterator[dict[str, str]]:
    """The environment of a process that talks to a fresh two-CPU Ray head on 127.0.0.1. The head
    is in Ray's default temp folder, as a plain `ray start --head` makes: ray.init() without an
    address would find it through /tmp/ray/ray_current_cluster and join it."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    with ray_head(env) as address:
        yield {**env, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": address}


def _tunefleet(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "orchestrator", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def _workers(db: Path) -> set[str]:
    with sqlite3.connect(db) as c:
        return {row[0] for row in c.execute("SELECT DISTINCT worker FROM tf_trials")}


def test_a_second_job_reuses_the_kept_worker_and_stop_ends_it(
    cluster_env: dict[str, str], tmp_path: Path
) -> None:
    dbs = [tmp_path / "a.db", tmp_path / "b.db"]
    for problem, db in zip(PROBLEMS, dbs, strict=True):
        done = _tunefleet(cluster_env, "tune", "matmul", "-p", problem, "--trials", "3",
                          "--keep-workers", "--db", f"sqlite:///{db}")  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    first, second = (_workers(db) for db in dbs)
    assert len(first) == 1 and first == second  # one actor (node/pid) measured both jobs
    stopped = _tunefleet(cluster_env, "workers", "stop")
    assert stopped.returncode == 0 and "stopped 1 kept worker" in stopped.stdout
    again = _tunefleet(cluster_env, "workers", "stop")
    assert "stopped 0 kept worker" in again.stdout


def test_keep_workers_without_a_cluster_is_refused_before_anything_runs(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = _tunefleet(env, "tune", "matmul", "-p", PROBLEMS[0], "--keep-workers",
                      "--db", f"sqlite:///{tmp_path / 'x.db'}")  # fmt: skip
    assert done.returncode != 0
    assert "kept workers need a running Ray cluster" in done.stderr
    assert not (tmp_path / "x.db").exists()


def test_a_job_without_an_address_starts_its_own_ray_beside_a_running_one(
    cluster_env: dict[str, str], tmp_path: Path
) -> None:
    del cluster_env  # the running head; this job is given no address of it
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_AUTH_MODE"] = "disabled"
    done = _tunefleet(env, "tune", "matmul", "-p", PROBLEMS[0], "--trials", "2",
                      "--device", "interpreter", "--db", f"sqlite:///{tmp_path / 'own.db'}")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(_workers(tmp_path / "own.db")) == 1

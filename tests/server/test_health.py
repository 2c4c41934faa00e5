"""Health tells the truth (issue 45): ``/healthz`` is 503 with a one-line reason while this
server's scheduler cannot run jobs (its workers did not start, its thread died, a class it serves
has no live worker), and submits are refused with that reason instead of queued for nobody."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from db import Database
from orchestrator.run.jobs import DeviceSource, SourceKind
from orchestrator.server.scheduler import Scheduler, _Group
from tests.server.conftest import CLI, ROOT, ServerFactory, job_body


@pytest.fixture
def backend() -> str:
    """Health is the server's own state: SQLite is enough."""
    return "sqlite"


class FakeScheduler:
    """What the API asks of a scheduler, with a problem the test sets."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def problem(self) -> str | None:
        return self.reason

    def device_classes(self) -> list[object]:
        return []


def test_healthz_and_submit_follow_the_scheduler(serve: ServerFactory) -> None:
    scheduler = FakeScheduler()
    api = serve(scheduler=scheduler)
    assert api.call(None, "GET", "/healthz").json() == {"status": "ok"}
    assert api.call("alpha", "POST", "/v1/jobs", json=job_body()).status_code == 201

    scheduler.reason = "no live worker of device class replay:NVIDIA H200"
    health = api.call(None, "GET", "/healthz")
    assert health.status_code == 503
    assert health.json() == {"status": "unavailable", "reason": scheduler.reason}
    refused = api.call("alpha", "POST", "/v1/jobs", json=job_body())
    assert refused.status_code == 503, refused.text
    assert scheduler.reason in refused.json()["error"]
    assert api.call("alpha", "GET", "/v1/jobs").json()["total"] == 1  # nothing queued for nobody

    scheduler.reason = None
    assert api.call(None, "GET", "/healthz").status_code == 200


def test_a_class_without_a_live_worker_is_a_problem(db: Database) -> None:
    scheduler = Scheduler(db, devices=[DeviceSource(SourceKind.INTERPRETER)])
    workers: list[object] = [SimpleNamespace(class_key="cpu")]
    pool = SimpleNamespace(
        workers=lambda: workers,
        health=lambda: [] if workers else ["device class cpu has no live worker (starting)"],
    )
    scheduler._groups.append(_Group("interpreter", [], {"cpu"}, pool))  # type: ignore[arg-type]
    assert scheduler.problem() is None
    workers.clear()  # the only worker was lost
    assert scheduler.problem() == "device class cpu has no live worker (starting)"


def test_a_scheduler_whose_workers_did_not_start_is_unhealthy(
    db: Database, serve: ServerFactory, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "tunefleet-landscape/1", "kernel": "matmul"}))
    scheduler = Scheduler(db, devices=[DeviceSource(SourceKind.REPLAY, (str(bad),))], poll_s=0.1)
    scheduler.start()
    try:
        deadline = time.monotonic() + 60
        while scheduler.problem() is None:
            assert time.monotonic() < deadline, "the scheduler never reported its workers"
            time.sleep(0.1)
        api = serve(scheduler=scheduler)
        health = api.call(None, "GET", "/healthz")
        assert health.status_code == 503
        assert "workers did not start" in health.json()["reason"]
        assert str(tmp_path) not in health.text  # no path on an unauthenticated route
        assert api.call("alpha", "POST", "/v1/jobs", json=job_body()).status_code == 503
    finally:
        scheduler.stop(10)


def test_serve_refuses_a_bad_replay_file_up_front(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    done = subprocess.run(
        [*CLI, "serve", "--port", "0", "--db", f"sqlite:///{tmp_path / 't.db'}",
         "--device", f"replay:{bad}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: cannot read landscape") and done.stderr.count("\n") == 1


def test_a_lost_database_is_a_503_that_names_no_path(db: Database, serve: ServerFactory) -> None:
    api = serve()
    path = str(db.engine.url.database)
    Path(path).rename(path + ".moved")  # the file the server opened is gone
    for who, route in ((None, "/healthz"), ("alpha", "/v1/jobs"), ("alpha", "/v1/kernels")):
        r = api.call(who, "GET", route)
        assert r.status_code == 503, (route, r.text)
        assert path not in r.text and "sqlite" not in r.text.lower(), r.text

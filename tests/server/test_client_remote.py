"""The client commands against the real API app with a real scheduler (local Ray, replay
workers): submit --watch runs the job to done, job/jobs/best/pull --server read it back, one team
cannot see or cancel another's job, and a bad token is one line with exit 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from db import Database
from orchestrator.commands.cli import main
from orchestrator.run.dispatch import PoolOptions, ensure_ray
from orchestrator.run.jobs import DeviceSource
from orchestrator.server.scheduler import Scheduler
from search_spaces.bundle import load_bundle
from tests.orchestrator.conftest import H200
from tests.server.conftest import Api, ServerFactory

SMALL = "M=256,N=256,K=256,dtype=float16"


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


@pytest.fixture
def remote(
    db: Database,
    serve: ServerFactory,
    landscapes: dict[str, list[Path]],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Api]:
    """The API with a scheduler of replay workers (H200 landscapes) on ``db``; the CLI's
    default server."""
    started = ensure_ray(None, 2)
    # The landscape of SMALL, the one problem of these jobs (a replay worker loads every file it
    # is given, in each pool and each re-timing).
    (small,) = [p for p in landscapes[H200] if p.name.endswith("-M256.json.gz")]
    device = DeviceSource.parse(f"replay:{small}")
    scheduler = Scheduler(
        db, devices=(device,), pool_options=PoolOptions(replay_delay_s=0.05), poll_s=0.2
    )
    scheduler.start()
    api = serve(scheduler=scheduler, served_devices=[str(device)])
    monkeypatch.setenv("TUNEFLEET_SERVER", api.url)
    try:
        yield api
    finally:
        scheduler.stop(60)
        if started:
            ray.shutdown()


def test_submit_watch_then_read_back_through_the_server(
    remote: Api, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNEFLEET_TOKEN", remote.tokens["alpha"][1])
    code, out, err = run_cli(
        capsys, "submit", "matmul", "-p", SMALL, "--trials", "6",
        "--device-class", f"replay:{H200}", "--watch", "--json",
    )  # fmt: skip
    assert code == 0, err
    detail = json.loads(out)
    assert detail["status"] == "done" and detail["team"] == "alpha"
    assert detail["studies"][0]["done"] == 6
    code, out, err = run_cli(capsys, "jobs", "--json")
    assert code == 0 and [j["job"] for j in json.loads(out)["jobs"]] == [detail["id"]]
    code, out, err = run_cli(capsys, "best", "matmul", "--json")
    assert code == 0 and json.loads(out)["best"][0]["team"] == "alpha"
    code, out, err = run_cli(capsys, "pull", "matmul", "--out", str(tmp_path / "b"))
    assert code == 0, err
    assert load_bundle(out.strip()).entries
    monkeypatch.setenv("TUNEFLEET_TOKEN", remote.tokens["beta"][1])
    code, out, err = run_cli(capsys, "job", str(detail["id"]))
    assert code == 2 and err.count("\n") == 1 and "HTTP 404" in err, err
    code, out, err = run_cli(capsys, "jobs", "--json")
    assert code == 0 and json.loads(out)["jobs"] == []
    monkeypatch.setenv("TUNEFLEET_TOKEN", "not-a-token")
    code, _, err = run_cli(capsys, "jobs")
    assert code == 2 and "HTTP 401" in err and err.count("\n") == 1, err

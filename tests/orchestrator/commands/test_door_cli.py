"""The CLI with a server in effect never falls back to the local database: a real server (uvicorn
on loopback, its own SQLite file) and a *different* local SQLite file ($TUNEFLEET_DB) whose jobs
have the same ids; with $TUNEFLEET_SERVER set, every remote-capable command acts on the server
(ids, teams and states only the server has) and each command that runs here refuses in one line,
exit 2, leaving both databases as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from db import Database, JobStatus, repository
from orchestrator.app.jobs import submit_job
from orchestrator.commands.cli import main
from orchestrator.run.jobs import JobSpec
from search_spaces.bundle import load_bundle
from tests.server.conftest import MATMUL_PROBLEMS, Api, ServerFactory, seed_best, serve  # noqa: F401

TINY = "M=16,N=16,K=16,dtype=float16"


@pytest.fixture
def backend() -> str:
    """The server's database: its own SQLite file."""
    return "sqlite"


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def _statuses(database: Database) -> dict[int, tuple[JobStatus, str | None]]:
    with database.session(readonly=True) as s:
        return {j.id: (j.status, j.team) for j in repository.list_jobs(s, limit=100)}


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Database:
    """The local database ($TUNEFLEET_DB): jobs 1-3 of team ``local``, failed."""
    url = f"sqlite:///{tmp_path / 'local.db'}"
    database = Database(url)
    database.upgrade()
    for _ in range(3):
        spec = JobSpec.from_mapping({"kernel": "matmul", "problems": [TINY], "team": "local"})
        job_id = submit_job(database, spec)
        with database.session() as s:
            repository.set_job_status(s, job_id, JobStatus.RUNNING)
            repository.set_job_status(s, job_id, JobStatus.FAILED, "local failure")
    monkeypatch.setenv("TUNEFLEET_DB", url)
    return database


@pytest.fixture
def remote(
    db: Database,
    serve: ServerFactory,  # noqa: F811 (the fixture imported above)
    local: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> Api:
    """The server on ``db``: job 1 done (team alpha, the stored bests), 2 cancelled, 3 queued;
    $TUNEFLEET_SERVER names it, $TUNEFLEET_TOKEN is its admin token."""
    api = serve()
    assert seed_best(db, "alpha", MATMUL_PROBLEMS) == 1
    for _ in range(2):
        response = api.call(
            "alpha", "POST", "/v1/jobs", json={"kernel": "matmul", "problems": [TINY]}
        )
        assert response.status_code == 201, response.text
    assert api.call("alpha", "POST", "/v1/jobs/2/cancel").json()["status"] == "cancelled"
    monkeypatch.setenv("TUNEFLEET_SERVER", api.url)
    monkeypatch.setenv("TUNEFLEET_TOKEN", api.tokens["admin"][1])
    return api


def test_every_remote_capable_command_acts_on_the_server(
    remote: Api,
    db: Database,
    local: Database,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    before_local = _statuses(local)

    code, out, err = run_cli(capsys, "jobs", "--json")
    assert code == 0, err
    assert [(j["job"], j["status"], j["team"]) for j in json.loads(out)["jobs"]] == [
        (3, "queued", "alpha"),
        (2, "cancelled", "alpha"),
        (1, "done", "alpha"),
    ]
    code, out, err = run_cli(capsys, "job", "1", "--json")
    assert code == 0 and json.loads(out)["status"] == "done", err

    code, out, err = run_cli(capsys, "cancel", "3")
    assert (code, out) == (0, "job 3: cancelled\n"), err
    code, out, err = run_cli(capsys, "resume", "2")
    assert code == 0, err
    assert out.startswith(f"job 2: queued on {remote.url}") and "tunefleet job 2 --watch" in out
    assert _statuses(db)[2] == (JobStatus.QUEUED, "alpha")
    assert _statuses(db)[3] == (JobStatus.CANCELLED, "alpha")

    code, out, err = run_cli(capsys, "best", "matmul", "--json")
    assert code == 0, err
    assert {(b["job"], b["team"]) for b in json.loads(out)["best"]} == {(1, "alpha")}
    code, out, err = run_cli(capsys, "pull", "matmul", "--out", str(tmp_path / "bundle"))
    assert code == 0, err
    assert len(load_bundle(out.strip()).entries) == len(MATMUL_PROBLEMS)
    code, out, err = run_cli(capsys, "plot", "1", "--out", str(tmp_path / "plot"))
    assert code == 0, err
    # A PNG per study of the server's job 1 (the local job 1 has no study).
    assert [Path(p).name for p in out.split()] == [
        "study-1-NVIDIA_H200.png",
        "study-2-NVIDIA_H200.png",
        "job-1.html",
    ]

    code, out, err = run_cli(
        capsys, "submit", "matmul", "-p", TINY, "--team", "alpha", "--trials", "2"
    )
    assert code == 0 and out.startswith(f"job 4: queued on {remote.url}"), err
    assert _statuses(db)[4] == (JobStatus.QUEUED, "alpha")

    code, out, err = run_cli(capsys, "token", "create", "--team", "gamma", "--scope", "read")
    assert code == 0, err
    secret = out.strip()
    code, out, err = run_cli(capsys, "token", "list", "--json")
    assert code == 0, err
    (gamma,) = [t for t in json.loads(out)["tokens"] if t["team"] == "gamma"]
    assert secret not in out and gamma["state"] == "active"
    code, out, err = run_cli(capsys, "token", "revoke", str(gamma["id"]))
    assert (code, out) == (0, f"token {gamma['id']} revoked\n"), err
    with db.session(readonly=True) as s:
        assert repository.verify_token(s, secret) is None  # revoked on the server's database
    with local.session(readonly=True) as s:
        assert repository.list_tokens(s) == []

    assert _statuses(local) == before_local  # the local database saw none of it


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["tune", "matmul", "-p", TINY, "--device", "interpreter"], ("tunefleet submit", "--db")),
        (["tune", "--from-capture", "nowhere"], ("tunefleet submit", "--db")),
        (
            ["revalidate", "matmul", "--device-class", "cpu", "--device", "interpreter"],
            ("stores only times its own workers measure", "--db"),
        ),
        (["resume", "2", "--ray-address", "127.0.0.1:1"], ("run a job on this machine", "--db")),
    ],
    ids=["tune", "tune-from-capture", "revalidate", "resume-here-options"],
)
def test_commands_that_run_here_refuse_in_one_line(
    remote: Api,
    db: Database,
    local: Database,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    words: tuple[str, ...],
) -> None:
    before = (_statuses(db), _statuses(local))
    code, out, err = run_cli(capsys, *args)
    assert (code, out) == (2, ""), err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert all(w in err for w in words), err
    assert (_statuses(db), _statuses(local)) == before


def test_db_picks_the_local_database_even_with_a_server_set(
    remote: Api, local: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    url = local.engine.url.render_as_string(hide_password=False)
    code, out, err = run_cli(capsys, "jobs", "--json", "--db", url)
    assert code == 0, err
    assert {(j["status"], j["team"]) for j in json.loads(out)["jobs"]} == {("failed", "local")}

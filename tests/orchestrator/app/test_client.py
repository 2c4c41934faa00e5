"""The HTTP client and the ``--server`` commands against a real uvicorn on loopback.

The server here is a small FastAPI app written for the test: it answers the routes the client
uses from a real SQLite database through the service functions (the wire format is their
``to_dict()``), checks a bearer token, and maps our errors to statuses, so the client's request
building, its reading of the views and its error mapping are checked end to end.
"""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from db import Database, JobStatus, repository
from db.errors import DatabaseURLError
from orchestrator.app.client import Client, bundle_members, job_request, read_token
from orchestrator.app.jobs import cancel_job, job_detail, list_jobs, submit_job
from orchestrator.app.results import best_configs, build_bundle
from orchestrator.commands.cli import main
from orchestrator.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    OrchestratorError,
    PermissionDenied,
    ServerError,
    ServerUnavailable,
    Unauthorized,
)
from orchestrator.run.jobs import JobSpec
from search_spaces.bundle import load_bundle
from tests.conftest import free_port
from tests.orchestrator.rows import CONFIG, add_study, store_best

TOKEN = "good-token"
TINY = "M=16,N=16,K=16,dtype=float16"
PROBLEM: dict[str, int | bool | str] = {"M": 16, "N": 16, "K": 16, "dtype": "float16"}
STATUS = (
    (PermissionDenied, 403),
    (NotFound, 404),
    (Conflict, 409),
    (OrchestratorError, 422),
)


def _spec(**fields: Any) -> JobSpec:
    return JobSpec.from_mapping({"kernel": "matmul", "problems": [TINY], **fields})


def make_app(database: Database, seen: list[dict[str, Any]]) -> FastAPI:
    app = FastAPI()

    @app.middleware("http")
    async def record(request: Request, call_next: Any) -> Response:
        body = await request.body()
        seen.append(
            {
                "method": request.method,
                "path": request.url.path,
                "query": dict(request.query_params),
                "auth": request.headers.get("authorization"),
                "body": json.loads(body) if body else None,
            }
        )
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse({"error": "no valid token", "detail": None}, 401)
        return await call_next(request)

    @app.exception_handler(OrchestratorError)
    async def ours(_: Request, exc: OrchestratorError) -> Response:
        status = next(code for kind, code in STATUS if isinstance(exc, kind))
        return JSONResponse({"error": str(exc), "detail": None}, status)

    @app.post("/v1/jobs", status_code=201)
    def submit(body: dict[str, Any]) -> Any:
        priority = body.pop("priority", 0)
        job_id = submit_job(database, JobSpec.from_mapping(body), priority=priority)
        return job_detail(database, job_id).to_dict()

    @app.get("/v1/jobs")
    def jobs(
        team: str | None = None,
        status: str | None = None,
        kernel: str | None = None,
        limit: int = 50,
        offset: int = 0,
        before: int | None = None,
    ) -> Any:
        filters = {"team": team, "status": status, "kernel": kernel}
        page = list_jobs(database, **filters, limit=limit, offset=offset, before=before)
        return page.to_dict()

    @app.get("/v1/jobs/{job_id}")
    def job(job_id: int) -> Any:
        return job_detail(database, job_id).to_dict()

    @app.post("/v1/jobs/{job_id}/cancel")
    def cancel(job_id: int) -> Any:
        return cancel_job(database, job_id, team="red").to_dict()  # the token's team

    @app.get("/v1/best")
    def best(kernel: str, device_class: str | None = None, problem: str | None = None) -> Any:
        if kernel == "boom":
            raise RuntimeError("a bug")  # a plain-text 500
        found = best_configs(database, kernel=kernel, device_class=device_class, problem=problem)
        return {"kernel": kernel, "best": [b.to_dict() for b in found]}

    @app.get("/v1/bundles/{kernel}")
    def bundle(kernel: str, device_class: str | None = None, format: str = "native") -> Response:
        if kernel == "evil":
            return Response(b"x", headers={"Content-Disposition": 'attachment; filename="..x"'})
        file = build_bundle(database, kernel, device_class=device_class, fmt=format)
        return Response(
            file.content,
            media_type=file.media_type,
            headers={"Content-Disposition": f'attachment; filename="{file.filename}"'},
        )

    return app


@pytest.fixture
def served(database: Database) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The test app on uvicorn at a free loopback port, and the requests it saw."""
    seen: list[dict[str, Any]] = []
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(make_app(database, seen), host="127.0.0.1", port=port, log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", seen
    server.should_exit = True
    thread.join(10)


def test_requests_carry_the_token_and_answers_read_back_as_views(
    database: Database, served: tuple[str, list[dict[str, Any]]]
) -> None:
    url, seen = served
    with Client(url + "/", TOKEN) as client:
        spec = JobSpec.from_mapping({"kernel": "matmul", "problems": [TINY], "team": "red"})
        detail = client.submit(spec, priority=3)
        assert seen[-1]["body"] == {**job_request(spec), "priority": 3}
        assert seen[-1]["auth"] == f"Bearer {TOKEN}"
        assert (detail.job.status, detail.job.priority, detail.job.team) == (
            JobStatus.QUEUED,
            3,
            "red",
        )
        page = client.jobs(team="red", status="queued", limit=5)
        assert seen[-1]["query"] == {"team": "red", "status": "queued", "limit": "5", "offset": "0"}
        assert [j.id for j in page.items] == [detail.job.id] and page.total == 1
        assert page.next_before is None
        assert client.jobs(before=detail.job.id).items == ()
        assert seen[-1]["query"]["before"] == str(detail.job.id)
        assert client.job(detail.job.id) == detail
        assert client.cancel(detail.job.id).status is JobStatus.CANCELLED
        store_best(database, detail.job.id, "cpu", PROBLEM)
        (best,) = client.best("matmul", problem=TINY).items
        assert seen[-1]["query"] == {"kernel": "matmul", "objective": "kernel", "problem": TINY}
        assert (best.config, best.job_id, best.team) == (CONFIG, detail.job.id, "red")
        one = client.bundle("matmul", device_class="cpu")
        assert bundle_members(one) == [one] and one.filename.endswith(".json")
        store_best(database, detail.job.id, "replay:cpu", PROBLEM)
        both = client.bundle("matmul", fmt="triton")
        assert both.media_type == "application/zip"
        members = bundle_members(both)
        assert [m.filename for m in members] == zipfile.ZipFile(io.BytesIO(both.content)).namelist()
        assert len(members) == 2


def test_error_statuses_become_our_exceptions_with_the_servers_message(
    database: Database, served: tuple[str, list[dict[str, Any]]]
) -> None:
    url, _ = served
    with (
        Client(url, None) as anonymous,
        pytest.raises(Unauthorized, match=r"no valid token.*TUNEFLEET_TOKEN.*HTTP 401"),
    ):
        anonymous.jobs()
    with Client(url, TOKEN) as client:
        with pytest.raises(NotFound, match=r"no job 999.*HTTP 404"):
            client.job(999)
        ours = client.submit(_spec(team="red")).job.id
        theirs = client.submit(_spec(team="blue")).job.id
        client.cancel(ours)
        with pytest.raises(Conflict, match=r"already cancelled.*HTTP 409"):
            client.cancel(ours)
        with pytest.raises(NotFound, match=rf"no job {theirs} of yours.*HTTP 404"):
            client.cancel(theirs)
        with pytest.raises(InvalidRequest, match=r"unknown kernel 'nope'.*HTTP 422"):
            client.submit(JobSpec("nope", _spec().problems))
        with pytest.raises(ServerError, match="HTTP 500"):
            client.best("boom")
        with pytest.raises(ServerError, match="refusing to write it"):
            client.bundle("evil")
    with (
        Client(f"http://127.0.0.1:{free_port()}", TOKEN) as closed,
        pytest.raises(ServerUnavailable, match="cannot reach"),
    ):
        closed.jobs()
    for bad in ("ftp://host", "127.0.0.1:8471", "http://"):
        with pytest.raises(OrchestratorError, match="is not a server URL"):
            Client(bad, TOKEN)


def test_token_from_file_else_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEFLEET_TOKEN", "from-env")
    path = tmp_path / "token"
    path.write_text("from-file\n")
    assert read_token(path) == "from-file" and read_token(None) == "from-env"
    path.write_text("\n")
    with pytest.raises(OrchestratorError, match="is empty"):
        read_token(path)
    with pytest.raises(OrchestratorError, match="cannot read --token-file"):
        read_token(tmp_path / "missing")


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def test_commands_with_server_render_what_they_render_locally(
    database: Database,
    db_url: str,
    served: tuple[str, list[dict[str, Any]]],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, seen = served
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    code, out, err = run_cli(
        capsys, "submit", "matmul", "-p", TINY, "--trials", "2", "--server", url,
        "--token-file", str(token_file), "--priority", "2", "--team", "red",
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("job 1: queued on ") and "--watch" in out
    assert seen[-1]["body"] == {
        "kernel": "matmul",
        "problems": [PROBLEM],
        "trials": 2,
        "team": "red",
        "priority": 2,
    }  # the fields given, not every default

    monkeypatch.setenv("TUNEFLEET_SERVER", url)
    monkeypatch.setenv("TUNEFLEET_TOKEN", TOKEN)
    code, remote, _ = run_cli(capsys, "jobs", "--json")
    assert code == 0
    code, local, _ = run_cli(capsys, "jobs", "--json", "--db", db_url)
    assert code == 0 and json.loads(remote) == json.loads(local)
    assert json.loads(remote)["jobs"][0]["priority"] == 2

    def finish() -> None:
        time.sleep(1.5)
        add_study(database, 1, PROBLEM, [("ok", 1.0), ("wrong", 0.0)])
        with database.session() as s:
            repository.set_job_status(s, 1, JobStatus.RUNNING)
            repository.set_job_status(s, 1, JobStatus.DONE)

    worker = threading.Thread(target=finish)
    worker.start()
    code, out, err = run_cli(capsys, "job", "1", "--watch")
    worker.join()
    assert code == 0, err
    assert "job 1: queued" in err and "job 1: done" in err and "2/2 trials" in err
    assert "done" in out and "ok 1, wrong 1" in out

    store_best(database, 1, "cpu", PROBLEM)
    code, remote, _ = run_cli(capsys, "best", "matmul", "--json")
    code, local, _ = run_cli(capsys, "best", "matmul", "--json", "--db", db_url)
    assert json.loads(remote) == json.loads(local) and json.loads(remote)["best"]
    code, out, err = run_cli(capsys, "pull", "matmul", "--out", str(tmp_path / "b"))
    assert code == 0, err
    assert load_bundle(out.strip()).lookup(PROBLEM) == CONFIG
    code, _, err = run_cli(capsys, "cancel", "1")
    assert code == 2 and "already done" in err and err.count("\n") == 1  # the server's 409

    for args in (["jobs", "--server", url, "--db", db_url], ["jobs", "--server", "nope"]):
        code, _, err = run_cli(capsys, *args)
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    monkeypatch.delenv("TUNEFLEET_SERVER")
    code, _, err = run_cli(capsys, "submit", "matmul", "-p", TINY)
    assert code == 2 and "give --server URL" in err


def test_a_password_in_a_url_is_never_shown() -> None:
    with pytest.raises(OrchestratorError) as bad:
        Client("ftp://bob:s3cret@example.org", None)
    assert "s3cret" not in str(bad.value) and "bob:***@" in str(bad.value)
    with (
        Client(f"http://bob:s3cret@127.0.0.1:{free_port()}", None) as closed,
        pytest.raises(ServerUnavailable) as down,
    ):
        closed.jobs()
    assert "s3cret" not in str(down.value) and "bob:***@127.0.0.1" in str(down.value)
    for url in ("postgresql+psycopg://bob:s3cret@127.0.0.1:99999/x", "mysql://bob:s3cret@h/x"):
        with pytest.raises(DatabaseURLError) as refused:
            Database(url)
        assert "s3cret" not in str(refused.value)

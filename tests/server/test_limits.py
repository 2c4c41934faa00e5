"""Limits of a shared server (issue 45): per-team caps on priority, trials and problems; audit
rows of refused requests rate-limited per token; half-open connections neither starve normal
requests nor stay open past the head timeout; an over-long request head gets 431."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from db import Database, repository
from orchestrator.server.quotas import TeamCaps
from orchestrator.server.refusals import SUPPRESSED
from tests.server.conftest import Api, ServerFactory, job_body, start_serve


@pytest.fixture
def backend() -> str:
    """Checks before any job runs: SQLite is enough."""
    return "sqlite"


def _audit(api: Api) -> list[repository.AuditRecord]:
    with api.database.session(readonly=True) as s:
        return repository.list_audit(s, limit=1000)


def test_a_team_s_job_over_a_cap_is_refused_with_one_line(serve: ServerFactory) -> None:
    api = serve(caps=TeamCaps(priority=5, trials=10, problems=2))
    three = ["M=16,N=16,K=16,dtype=float16", "M=32,N=32,K=32,dtype=float16", "M=64,N=64,K=64,dtype=float16"]  # fmt: skip
    for body, says in (
        (job_body(priority=6), "priority 6"),
        (job_body(priority=-6), "priority 6"),
        (job_body(trials=11), "trials per study 11"),
        (job_body(problems=three), "problems per job 3"),
    ):
        r = api.call("alpha", "POST", "/v1/jobs", json=body)
        assert r.status_code == 403, r.text
        error = r.json()["error"]
        assert says in error and "cap for team alpha" in error and "\n" not in error
    assert api.call("alpha", "POST", "/v1/jobs", json=job_body(priority=5, trials=10)).is_success
    # An admin (the operator) is not capped.
    admin = api.call("admin", "POST", "/v1/jobs", json=job_body(priority=900, problems=three))
    assert admin.status_code == 201, admin.text


def test_refused_requests_write_few_audit_rows(serve: ServerFactory) -> None:
    api = serve(refusals_per_minute=3)
    for _ in range(8):
        assert api.call("alpha_read", "POST", "/v1/jobs", json=job_body()).status_code == 403
        assert api.call("beta", "POST", "/v1/jobs/424242/cancel").status_code == 404
    rows = _audit(api)
    for who in ("alpha_read", "beta"):
        mine = [e for e in rows if e.token_id == api.tokens[who][0]]
        assert len(mine) == 4, [(e.action, e.detail) for e in mine]  # 3, then one summary
        (summary,) = [e for e in mine if e.action == SUPPRESSED]
        assert summary.detail == {"after": 3, "window_s": 60.0}
    # Accepted changes are always audited.
    for _ in range(5):
        assert api.call("alpha", "POST", "/v1/jobs", json=job_body()).status_code == 201
    accepted = [e for e in _audit(api) if e.token_id == api.tokens["alpha"][0]]
    assert len(accepted) == 5


def _half_open(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that each send part of a request head and then nothing."""
    held = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        held.append(sock)
    return held


def test_half_open_connections_do_not_starve_requests(db: Database) -> None:
    url = db.engine.url.render_as_string(hide_password=False)
    proc, base = start_serve("--no-scheduler", "--db", url, "--head-timeout", "1.5")
    port = int(base.rsplit(":", 1)[1])
    held: list[socket.socket] = []
    try:
        held = _half_open(port, 50)
        started = time.monotonic()
        assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
        assert time.monotonic() - started < 2.0
        # The server closes every half-open connection once its head is late.
        for sock in held:
            sock.settimeout(5)
            assert sock.recv(1024) == b""
        assert time.monotonic() - started < 8.0
        big = socket.create_connection(("127.0.0.1", port), timeout=5)
        big.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 70_000)
        assert big.recv(1024).startswith(b"HTTP/1.1 431")
        big.close()
        assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
    finally:
        for sock in held:
            sock.close()
        proc.kill()
        proc.wait()

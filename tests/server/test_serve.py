"""``tunefleet serve`` and ``tunefleet token`` in subprocesses: tokens printed once and stored
hashed, a non-loopback bind without tokens refused, SIGTERM stops the server cleanly."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import httpx
import pytest

from db import Database, repository
from orchestrator.commands.serve import is_loopback
from tests.conftest import free_port
from tests.server.conftest import CLI, ROOT, start_serve


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def backend() -> str:
    return "sqlite"


@pytest.fixture
def url(db: Database) -> str:
    return db.engine.url.render_as_string(hide_password=False)


def test_is_loopback() -> None:
    assert all(map(is_loopback, ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost")))
    assert not any(map(is_loopback, ("0.0.0.0", "::", "10.0.0.5", "example.org")))


def test_token_commands(url: str, db: Database) -> None:
    done = cli(
        "token", "create", "--team", "alpha", "--scope", "submit", "--expires", "2", "--db", url
    )
    assert done.returncode == 0, done.stderr
    secret = done.stdout.strip()
    assert len(secret) >= 40 and "\n" not in secret
    assert "shown only now" in done.stderr
    with db.session(readonly=True) as s:
        (record,) = repository.list_tokens(s)
        assert repository.verify_token(s, secret) is not None
    assert (record.team, record.scope.value) == ("alpha", "submit")
    assert record.expires_at is not None

    listed = cli("token", "list", "--json", "--db", url)
    assert secret not in listed.stdout and '"state": "active"' in listed.stdout

    assert cli("token", "revoke", str(record.id), "--db", url).returncode == 0
    again = cli("token", "revoke", str(record.id), "--db", url)
    assert again.returncode == 2 and again.stderr.startswith("error: no active token")
    for bad in (["--team", "../etc", "--scope", "read"], ["--team", "a", "--scope", "root"]):
        refused = cli("token", "create", *bad, "--db", url)
        assert refused.returncode == 2, refused.stderr
    with db.session(readonly=True) as s:
        actions = [e.action for e in repository.list_audit(s)]
        assert len(repository.list_tokens(s)) == 1
    assert actions == ["token.revoke", "token.create"]


def test_a_public_bind_without_tokens_is_refused(url: str) -> None:
    done = cli(
        "serve", "--host", "0.0.0.0", "--port", str(free_port()), "--no-scheduler", "--db", url
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: refusing to listen on 0.0.0.0 with no token")
    assert done.stderr.count("\n") == 1


def test_serve_answers_then_stops_on_sigterm(url: str) -> None:
    secret = cli("token", "create", "--team", "ops", "--scope", "read", "--db", url).stdout.strip()
    proc, base = start_serve("--no-scheduler", "--db", url)
    try:
        headers = {"Authorization": f"Bearer {secret}"}
        assert httpx.get(f"{base}/v1/jobs", headers=headers).json()["total"] == 0
        assert httpx.get(f"{base}/v1/jobs").status_code == 401
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "INFO:     Shutting down" in out


def test_the_cli_stays_light_and_the_server_loads_no_gpu_or_cluster_library() -> None:
    probe = (
        "import sys\n"
        "from orchestrator.commands.cli import build_app\n"
        "build_app()\n"
        "light = [m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules]\n"
        "import orchestrator.server.app\n"
        "heavy = [m for m in ('torch', 'triton', 'ray', 'optuna') if m in sys.modules]\n"
        "print(light, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "[] []", out.stderr


def test_a_port_in_use_is_one_line(url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("serve", "--port", str(port), "--no-scheduler", "--db", url)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}")
    assert done.stderr.count("\n") == 1

"""A real API server (uvicorn on a free loopback port, in a thread) on SQLite and on PostgreSQL,
with tokens of two teams and an admin, and best configs that team ``alpha`` produced."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from db import Database, JobStatus, repository
from db.models import TokenScope
from orchestrator.server.app import create_app
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from search_spaces.space import Vendor, config_key

MATMUL_PROBLEMS = [
    {"M": 16, "N": 16, "K": 16, "dtype": "float16"},
    {"M": 32, "N": 32, "K": 32, "dtype": "float16"},
]
TRITON_MINOR = "3.6"
CLASS_KEY = "NVIDIA H200"


class LiveServer:
    """uvicorn serving ``app`` on 127.0.0.1 at a port the OS picked, in a daemon thread."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from orchestrator.commands.cli import main; main()"]


def start_serve(*args: str) -> tuple[subprocess.Popen[str], str]:
    """``tunefleet serve --port 0 ARGS`` in a subprocess, once it answers /healthz: the process
    (stdout and stderr in ``stdout``) and its base URL."""
    proc = subprocess.Popen(
        [*CLI, "serve", "--port", "0", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    line = ""
    while "tunefleet API on" not in line:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            raise RuntimeError(f"tunefleet serve exited with {proc.returncode}")
    match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    assert match, line
    base = f"http://127.0.0.1:{match.group(1)}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("tunefleet serve did not answer /healthz")
        time.sleep(0.2)


def make_token(
    database: Database, team: str, scope: TokenScope, expires_at: datetime | None = None
) -> tuple[int, str]:
    with database.session() as s:
        record, secret = repository.create_token(s, team, scope, expires_at=expires_at)
    return record.id, secret


def seed_best(database: Database, team: str, problems: list[dict[str, Any]]) -> int:
    """A finished matmul job of ``team`` whose trials are the stored best configs; its id."""
    spec = get_spec("matmul")
    config = spec.default_config(Vendor.NVIDIA)
    with database.session() as s:
        kernel_id = repository.ensure_kernel(s, spec.name, spec.version_hash(), spec.space.hash())
        job_spec = {"kernel": "matmul", "problems": problems, "team": team}
        job_id = repository.create_job(s, kernel_id, job_spec, team)
        cls_id = repository.ensure_device_class(s, CLASS_KEY, "nvidia", CLASS_KEY, "sm_90")
        for i, problem in enumerate(problems):
            key = problem_key(spec.validate_problem(problem))
            study_id = repository.ensure_study(
                s, job_id, kernel_id, key, problem, cls_id, "local", f"job{job_id}-{i}"
            )
            trial_id = repository.record_trial(
                s,
                kernel_id=kernel_id,
                problem_key=key,
                device_class_id=cls_id,
                config=config,
                config_key=config_key(config),
                outcome="ok",
                job_id=job_id,
                study_id=study_id,
                median_ms=0.01 * (i + 1),
            )
            repository.upsert_best(
                s,
                spec.name,
                spec.version_hash(),
                key,
                cls_id,
                TRITON_MINOR,
                config,
                0.01 * (i + 1),
                trial_id,
                job_id,
                None,
            )
        repository.set_job_status(s, job_id, JobStatus.RUNNING)
        repository.set_job_status(s, job_id, JobStatus.DONE)
    return job_id


@dataclass
class Api:
    """The running server with a client per token: ``alpha_read``, ``alpha``, ``beta``, ``admin``."""

    server: LiveServer
    database: Database
    tokens: dict[str, tuple[int, str]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, who: str | None) -> httpx.Client:
        headers = {} if who is None else {"Authorization": f"Bearer {self.tokens[who][1]}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def call(self, who: str | None, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with self.client(who) as c:
            return c.request(method, path, **kwargs)


ServerFactory = Callable[..., Api]


@pytest.fixture
def serve(db: Database) -> Iterator[ServerFactory]:
    """Start the server on the test's database with ``create_app`` keyword arguments."""
    started: list[LiveServer] = []

    def start(**kwargs: Any) -> Api:
        live = LiveServer(create_app(db, **kwargs)).__enter__()
        started.append(live)
        api = Api(live, db)
        for who, team, scope in (
            ("alpha_read", "alpha", TokenScope.READ),
            ("alpha", "alpha", TokenScope.SUBMIT),
            ("beta", "beta", TokenScope.SUBMIT),
            ("admin", "ops", TokenScope.ADMIN),
        ):
            api.tokens[who] = make_token(db, team, scope)
        return api

    yield start
    for live in started:
        live.__exit__()


@pytest.fixture
def api(serve: ServerFactory) -> Api:
    return serve()


def job_body(**extra: Any) -> dict[str, Any]:
    """A small valid job spec (not run: these servers have no scheduler)."""
    return {"kernel": "matmul", "problems": ["M=16,N=16,K=16,dtype=float16"], "trials": 2, **extra}


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    """(event, decoded data) pairs from a server-sent event stream."""
    event, data = "message", []
    for line in lines:
        if line == "":
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith("event:"):
            event = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").strip())

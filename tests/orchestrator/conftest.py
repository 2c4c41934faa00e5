"""Shared fixtures: a replay pool of the synthetic H200 landscapes (the ``landscapes`` fixture is
tests/conftest.py's), a fresh SQLite database per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from db import Database
from orchestrator.run.local_pool import LocalPool
from orchestrator.run.worker import WorkerPlan

H200 = "NVIDIA H200"
A100 = "NVIDIA A100-SXM4-80GB"


@pytest.fixture
def h200_pool(landscapes: dict[str, list[Path]]) -> Iterator[LocalPool]:
    """An in-process pool of one replay worker of the synthetic H200 landscapes."""
    local = LocalPool([WorkerPlan("replay", tuple(str(p) for p in landscapes[H200]))])
    yield local
    local.shutdown()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tunefleet.db'}"


@pytest.fixture
def database(db_url: str) -> Database:
    database = Database(db_url)
    database.ensure_schema()
    return database

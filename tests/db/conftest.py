"""The ``db`` fixture: a migrated database of each backend (``backend``/``empty_url`` live in
tests/conftest.py, shared with the other test packages)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from db import Database


@pytest.fixture
def db(empty_url: str) -> Iterator[Database]:
    """A migrated database of ``backend``."""
    database = Database(empty_url)
    database.upgrade()
    yield database
    database.close()

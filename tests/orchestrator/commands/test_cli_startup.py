"""Start-up cost (benchmarks/cli_startup.py times it): help imports neither the database layer
nor a GPU or cluster library; the kernel views import no database layer, and the database views
of a database at the newest schema import no migration tool or HTTP client (each checked in a
fresh interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from db import Database

LIGHT_COMMANDS = [["--help"], ["db"], ["tune", "--help"], ["jobs", "--help"]]
HEAVY = ("sqlalchemy", "alembic", "torch", "triton", "ray", "optuna", "numpy")
#: What no database view needs: migrations (the schema is current), a server client, the cluster.
NOT_FOR_VIEWS = ("alembic", "httpx", "torch", "triton", "ray", "optuna", "numpy")


def _loaded(args: list[str], names: tuple[str, ...], env: dict[str, str] | None = None) -> str:
    """The sorted list of ``names`` loaded after ``tunefleet ARGS`` ran in a fresh interpreter."""
    code = (
        "import sys\n"
        "from orchestrator.commands.cli import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in {names!r} if m in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("args", LIGHT_COMMANDS, ids=" ".join)
def test_light_commands_load_no_heavy_package(args: list[str]) -> None:
    """Building the app and its help imports neither the database layer nor a GPU or cluster
    library."""
    assert _loaded(args, HEAVY) == "[]"


@pytest.mark.parametrize(
    "args", [["kernels"], ["space", "matmul", "--device-class", "H200"]], ids=" ".join
)
def test_kernel_views_load_no_database_layer(args: list[str]) -> None:
    assert _loaded(args, HEAVY) == "[]"


@pytest.mark.parametrize("args", [["jobs"], ["best", "matmul"]], ids=" ".join)
def test_database_views_load_no_migrations_nor_client(args: list[str], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/views.db"
    Database(url).upgrade()
    env = {k: v for k, v in os.environ.items() if k != "TUNEFLEET_SERVER"}
    assert _loaded(args, NOT_FOR_VIEWS, {**env, "TUNEFLEET_DB": url}) == "[]"

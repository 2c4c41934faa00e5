"""Start-up cost (benchmarks/cli_startup.py times it): help imports neither the database layer
nor a GPU or cluster library (checked in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

import pytest

LIGHT_COMMANDS = [["--help"], ["db"], ["tune", "--help"], ["jobs", "--help"]]
HEAVY = ("sqlalchemy", "alembic", "torch", "triton", "ray", "optuna", "numpy")


@pytest.mark.parametrize("args", LIGHT_COMMANDS, ids=" ".join)
def test_light_commands_load_no_heavy_package(args: list[str]) -> None:
    """Start-up cost (benchmarks/cli_startup.py times it): building the app and its help imports
    neither the database layer nor a GPU or cluster library."""
    code = (
        "import sys\n"
        "from orchestrator.cli import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr

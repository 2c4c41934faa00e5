"""Helpers shared by the CLI's command modules: options, output and opening the database."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.errors import OrchestratorError

if TYPE_CHECKING:
    from rich.console import Console

    from db import Database

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", help="Database URL (default: $TUNEFLEET_DB or a SQLite file in your data dir)."
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON object instead of tables.")
]
WideOption = Annotated[
    bool, typer.Option("--wide", help="Show every column at full width (tables may not fit).")
]
KernelArgument = Annotated[str, typer.Argument(help="Kernel name or MODULE:ATTRIBUTE.")]
JobArgument = Annotated[int, typer.Argument(help="Job id.")]

DEVICE_CHOICES = ("auto", "cuda", "rocm", "interpreter")
DeviceOption = Annotated[str, typer.Option("--device", help="auto|cuda|rocm|interpreter")]


def check_device(device: str) -> str:
    """``device`` if it is one of DEVICE_CHOICES; else OrchestratorError (one line, exit 2)."""
    if device.startswith("replay:"):
        raise OrchestratorError(
            f"--device {device!r}: replayed devices answer tune jobs; this command times on this "
            f"machine: use one of {', '.join(DEVICE_CHOICES)}"
        )
    if device not in DEVICE_CHOICES:
        raise OrchestratorError(f"--device {device!r} is not one of {', '.join(DEVICE_CHOICES)}")
    return device


def open_database(url: str | None) -> Database:
    """The database at ``url`` (or the default), with its schema created or upgraded if needed."""
    from db import Database

    database = Database(url)
    database.ensure_schema()
    return database


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def console() -> Console:
    from rich.console import Console

    return Console(highlight=False)

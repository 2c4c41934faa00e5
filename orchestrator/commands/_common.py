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
    from orchestrator.run.jobs import DeviceSource

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

#: The one value set of ``--device`` (orchestrator.run.jobs.DeviceSource), for every command.
DEVICE_HELP = (
    "auto (the GPUs, else Triton's CPU interpreter), cuda, rocm, interpreter, or "
    "replay:FILE[,FILE] (a landscape recorded by `tunefleet record` answers)"
)
DeviceOption = Annotated[str, typer.Option("--device", help=f"{DEVICE_HELP}.")]
DevicesOption = Annotated[
    list[str] | None,
    typer.Option("--device", help=f"{DEVICE_HELP}; repeatable (default auto)."),
]


def parse_device(text: str) -> DeviceSource:
    """``--device``'s value, parsed as a job's devices are (JobSpecError: one line, exit 2)."""
    from orchestrator.run.jobs import DeviceSource

    return DeviceSource.parse(text)


def check_device(text: str) -> DeviceSource:
    """``--device``'s value for a command that measures this machine's device: a replayed one
    is refused (one line, exit 2)."""
    from orchestrator.run.jobs import SourceKind

    source = parse_device(text)
    if source.kind is SourceKind.REPLAY:
        raise OrchestratorError(
            f"--device {text!r}: this command measures this machine's device and a replayed one "
            "has nothing to measure; use auto, cuda, rocm or interpreter"
        )
    return source


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

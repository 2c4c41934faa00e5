"""The ``tunefleet`` command line: one Typer app; our errors become one line on stderr and exit 2."""

from __future__ import annotations

import sys

import click
import typer

from db.errors import DatabaseError
from orchestrator.errors import OrchestratorError
from search_spaces.errors import SpecError
from workers.errors import WorkerError

USER_ERRORS = (SpecError, DatabaseError, WorkerError, OrchestratorError)
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def build_app() -> typer.Typer:
    """The app with every command group registered (imports stay light: no torch, no Ray)."""
    from orchestrator.commands import capture, core, profile, revalidate, serve
    from orchestrator.commands import tune as tune_commands

    app = typer.Typer(
        name="tunefleet",
        help="Distributed autotuning of GPU kernels: tune, store and pull best configs per device.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    core.register(app)
    tune_commands.register(app)
    capture.register(app)
    revalidate.register(app)
    profile.register(app)
    serve.register(app)
    return app


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script; exits with 0, 2 (bad input) or 130 (interrupted)."""
    command = typer.main.get_command(build_app())
    try:
        result = command.main(args=argv, prog_name="tunefleet", standalone_mode=False)
    except click.exceptions.Abort:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    sys.exit(result if isinstance(result, int) else 0)

"""The ``tunefleet`` command line: one Typer app; every user mistake is one ``error:`` line on
stderr with what to do, exit 2; help (also for a bare group) on stdout, exit 0."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer

# Typer (pinned to 0.29 in pyproject) bundles its own click; its exceptions live here.
from typer._click import exceptions as click_errors

from orchestrator.errors import Terminated

#: Our error types at the package boundaries: (module, class). Only modules already imported are
#: consulted (an error of a package never imported cannot have been raised), so the CLI does not
#: load the database or the workers just to be able to catch their errors.
USER_ERRORS = (
    ("search_spaces.errors", "SpecError"),
    ("db.errors", "DatabaseError"),
    ("workers.errors", "WorkerError"),
    ("orchestrator.errors", "OrchestratorError"),
)
EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + 15  # SIGTERM, as a shell reports a process it ended
PROG = "tunefleet"


def version() -> str:
    """The installed distribution's version (the source tree's pyproject if not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version(PROG)
    except PackageNotFoundError:
        return "unknown (not installed)"


def _show_version(value: bool) -> None:
    if value:
        print(f"{PROG} {version()}")
        raise typer.Exit(EXIT_OK)


def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Distributed autotuning of GPU kernels: tune, store and pull best configs per device."""


def build_app() -> typer.Typer:
    """The app with every command group registered (imports stay light: no torch, no Ray)."""
    from orchestrator.commands import capture, core, profile, revalidate, serve, submit, tokens
    from orchestrator.commands import tune as tune_commands

    app = typer.Typer(
        name=PROG,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    app.callback()(_root)
    core.register(app)
    tune_commands.register(app)
    submit.register(app)
    capture.register(app)
    revalidate.register(app)
    profile.register(app)
    serve.register(app)
    tokens.register(app)
    return app


def command_path(root: Any, argv: list[str]) -> str:
    """``tunefleet GROUP COMMAND``: as far as ``argv`` names (sub)commands of ``root``."""
    words, command = [PROG], root
    for word in argv:
        command = getattr(command, "commands", {}).get(word)
        if command is None:
            break
        words.append(word)
    return " ".join(words)


def usage_line(exc: click_errors.UsageError, path: str) -> str:
    """One line: what is wrong, then where the help for that command is."""
    message = " ".join(exc.format_message().split()).rstrip(".")
    message = message[0].lower() + message[1:] if message else "bad usage"
    return f"error: {message}; see {path} --help"


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is one of our boundary errors: bad input, shown as one line."""
    for module_name, name in USER_ERRORS:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(exc, getattr(module, name)):
            return True
    return False


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script; exits with 0, 2 (bad input), 130 (interrupted) or
    143 (SIGTERM)."""
    command = typer.main.get_command(build_app())
    args = sys.argv[1:] if argv is None else argv
    try:
        result = command.main(args=args, prog_name=PROG, standalone_mode=False)
    except click_errors.NoArgsIsHelpError as exc:
        # A bare ``tunefleet`` or ``tunefleet db``: its help is the answer, not an error.
        print(exc.format_message())
        sys.exit(EXIT_OK)
    except click_errors.UsageError as exc:
        print(usage_line(exc, command_path(command, args)), file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except click_errors.ClickException as exc:
        print(f"error: {' '.join(exc.format_message().split())}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except typer.Abort:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Terminated:
        # The job is recorded and Ray is shut down; after a signal inside a blocking Ray call,
        # Ray's core library aborts the interpreter's finalization (SIGABRT), so skip it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_TERMINATED)
    except Exception as exc:
        if not is_user_error(exc):
            raise
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    sys.exit(result if isinstance(result, int) else EXIT_OK)

"""Which door a command goes through, chosen once: a server (``--server``, else
``$TUNEFLEET_SERVER`` unless ``--db`` is given) or the database (``--db``, else ``$TUNEFLEET_DB``
or the default SQLite file). Every command that can run remotely takes the door
:func:`door_for` gives and is written once against :class:`orchestrator.app.protocol.Door`; a
command that runs only here (``tune``) calls :func:`local_only` first, which refuses while a
server is in effect instead of falling back to the local database.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.errors import NotRemote, OrchestratorError

if TYPE_CHECKING:
    from orchestrator.app.protocol import Door

ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="A tunefleet server, e.g. http://127.0.0.1:8471 (default: $TUNEFLEET_SERVER "
        "unless --db is given; neither: use the database directly).",
    ),
]
TokenFileOption = Annotated[
    Path | None,
    typer.Option("--token-file", help="File holding the server token (default: $TUNEFLEET_TOKEN)."),
]


def server_url(server: str | None, db: str | None) -> str | None:
    """The server in effect (see the module doc), or None for the database."""
    from orchestrator.app.client import SERVER_ENV

    if server and db:
        raise OrchestratorError("give --server or --db, not both: a server reads its own database")
    return server or (None if db else os.environ.get(SERVER_ENV) or None)


def same_door(server: str | None, db: str | None) -> str:
    """The options that pick the same door again in a hint (`` --server URL``, `` --db URL`` or
    nothing when the environment picked it)."""
    from orchestrator.app.client import masked

    if server:
        return f" --server {masked(server)}"
    return f" --db {masked(db)}" if db else ""


def door_for(server: str | None, token_file: Path | None, db: str | None) -> Door:
    """The door of a command: the server's HTTP client, or the database at ``db`` (opened on
    first use)."""
    url = server_url(server, db)
    if url is None:
        if token_file is not None:
            raise OrchestratorError("--token-file is for a server: give --server URL too")
        from orchestrator.app.local import LocalDoor
        from orchestrator.commands._common import open_database

        return LocalDoor(lambda: open_database(db))
    from orchestrator.app.client import Client, read_token

    return Client(url, read_token(token_file))


def local_only(command: str, db: str | None) -> None:
    """NotRemote while a server is in effect (``$TUNEFLEET_SERVER`` without ``--db``), for a
    command that runs jobs on this machine: it never falls back to a local database."""
    url = server_url(None, db)
    if url is not None:
        from orchestrator.app.client import SERVER_ENV, masked

        raise NotRemote(
            f"`tunefleet {command}` runs jobs on this machine, and {SERVER_ENV} names the "
            f"server {masked(url)}: queue the job there with `tunefleet submit`, or {command} "
            "here into a database with --db URL"
        )

"""``--server`` and ``--token-file`` on the job commands: whether a command asks a server or
reads the database itself.

A command asks the server given by ``--server``, else by $TUNEFLEET_SERVER unless ``--db`` is
given; with neither it works on the database directly, as it always did.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.errors import OrchestratorError

if TYPE_CHECKING:
    from orchestrator.app.client import Client

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


def client_for(server: str | None, token_file: Path | None, db: str | None) -> Client | None:
    """A client of the server to ask, or None to use the database (see the module doc)."""
    from orchestrator.app.client import SERVER_ENV

    if server and db:
        raise OrchestratorError("give --server or --db, not both: a server reads its own database")
    url = server or (None if db else os.environ.get(SERVER_ENV) or None)
    if url is None:
        if token_file is not None:
            raise OrchestratorError("--token-file is for a server: give --server URL too")
        return None
    from orchestrator.app.client import Client, read_token

    return Client(url, read_token(token_file))

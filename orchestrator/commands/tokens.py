"""``tunefleet token create|list|revoke``: the API's bearer tokens, through the door (on a
database with ``--db``, the first admin token included; on a server with an admin token)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from db.states import TokenScope
from orchestrator.commands._common import DbOption, JsonOption, console, print_json
from orchestrator.commands.remote import ServerOption, TokenFileOption, door_for
from orchestrator.errors import OrchestratorError

token_app = typer.Typer(help="Manage the API's bearer tokens.", no_args_is_help=True)


def team_name(value: str) -> str:
    """``value`` if it is a valid team name; else OrchestratorError (one line)."""
    from orchestrator.server.names import BadName, team

    try:
        return team(value)
    except BadName as exc:
        raise OrchestratorError(str(exc)) from None


@token_app.command("create")
def token_create(
    team: Annotated[str, typer.Option("--team", help="The team the token acts for.")],
    scope: Annotated[str, typer.Option("--scope", help="read, submit (and cancel) or admin.")],
    expires: Annotated[
        float | None, typer.Option("--expires", min=0.001, help="Days until it expires.")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="A note: who or what uses it.")] = None,
    db: DbOption = None,
    server: ServerOption = None,
    token_file: TokenFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Create a token and print it once (the database keeps only its SHA-256)."""
    try:
        chosen = TokenScope(scope)
    except ValueError:
        raise OrchestratorError(f"unknown scope {scope!r}; use read, submit or admin") from None
    checked = team_name(team)
    with door_for(server, token_file, db) as door:
        created = door.create_token(checked, chosen, expires_days=expires, name=name)
    token = created.token
    if json_out:
        print_json(
            {"id": token.id, "team": token.team, "scope": chosen.value, "token": created.secret}
        )
        return
    print(created.secret)
    until = f", expires {token.expires_at:%Y-%m-%d %H:%M} UTC" if token.expires_at else ""
    print(
        f"token {token.id} for team {token.team} ({chosen.value}{until}); it is shown only now",
        file=sys.stderr,
    )


@token_app.command("list")
def token_list(
    db: DbOption = None,
    server: ServerOption = None,
    token_file: TokenFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """List the tokens (never their secrets)."""
    from rich.table import Table

    with door_for(server, token_file, db) as door:
        found = door.tokens()
    rows = [
        {
            "id": t.id,
            "team": t.team,
            "scope": t.scope.value,
            "name": t.name,
            "state": t.state.value,
            "created_at": t.created_at.isoformat(timespec="seconds"),
            "expires_at": t.expires_at.isoformat(timespec="seconds") if t.expires_at else None,
            "last_used_at": t.last_used_at.isoformat(timespec="seconds")
            if t.last_used_at
            else None,
        }
        for t in found
    ]
    if json_out:
        print_json({"tokens": rows})
        return
    table = Table(title="tokens")
    for column in rows[0] if rows else ("id", "team", "scope", "state"):
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row.values()))
    console().print(table)


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[int, typer.Argument(help="Token id (see `tunefleet token list`).")],
    db: DbOption = None,
    server: ServerOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Revoke a token; every server refuses it from its next request on."""
    with door_for(server, token_file, db) as door:
        door.revoke_token(token_id)
    print(f"token {token_id} revoked")


def register(app: typer.Typer) -> None:
    """Add ``token`` to ``app``."""
    app.add_typer(token_app, name="token")

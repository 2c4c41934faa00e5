"""Service commands: ``serve`` (the HTTP API and a scheduler) and ``token create|list|revoke``.

FastAPI, uvicorn and the scheduler are imported inside ``serve``, so building the CLI stays light.
"""

from __future__ import annotations

import ipaddress
import signal
import socket
import sys
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from db.states import TokenScope
from orchestrator.commands._common import (
    DbOption,
    JsonOption,
    console,
    open_database,
    print_json,
)
from orchestrator.errors import OrchestratorError
from orchestrator.server.connections import ConnectionLimits
from orchestrator.server.quotas import TeamCaps

if TYPE_CHECKING:
    import uvicorn

    from db import Database

DEFAULT_PORT = 8471
STOP_TIMEOUT_S = 60.0


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(database: Database, host: str) -> int:
    """The number of active tokens; OrchestratorError if ``host`` is not loopback and there is none
    (a server reachable by others would refuse every request, or worse, be set up in a hurry)."""
    from db import repository

    with database.session(readonly=True) as s:
        active = repository.active_token_count(s)
    if active == 0 and not is_loopback(host):
        raise OrchestratorError(
            f"refusing to listen on {host} with no token in the database; create one first with "
            "`tunefleet token create --team T --scope admin`, or bind 127.0.0.1"
        )
    return active


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: one the OS picks); OrchestratorError if the
    address cannot be had. The protocol is named so that asyncio sets TCP_NODELAY on its
    connections (small answers would otherwise wait 40 ms for a delayed ACK)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise OrchestratorError(f"cannot listen on {host}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise OrchestratorError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --port"
        ) from None
    return sock


def _stop_gracefully(server: uvicorn.Server, scheduler: Any) -> None:
    """On SIGTERM/SIGINT: stop the scheduler (trials in flight are recorded, leases released)
    while the API still answers, then let uvicorn shut down; a second signal forces the exit."""
    stopping = threading.Event()

    def stop() -> None:
        if scheduler is not None:
            scheduler.stop(STOP_TIMEOUT_S)
        server.should_exit = True

    def handle(_signum: int, _frame: object) -> None:
        if stopping.is_set():
            server.force_exit = True
            return
        stopping.set()
        threading.Thread(target=stop, name="tunefleet-stop", daemon=True).start()

    # uvicorn swaps its own handler in while it runs and restores these afterwards.
    server.handle_exit = handle  # type: ignore[method-assign,assignment]
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)


def _env_option(flag: str, help: str, min: float, max: float | None = None) -> Any:
    """A typer option ``flag`` that also reads ``TUNEFLEET_<FLAG>`` (``--max-trials``:
    ``TUNEFLEET_MAX_TRIALS``), from ``min`` to ``max`` (None: no bound)."""
    envvar = "TUNEFLEET_" + flag.removeprefix("--").upper().replace("-", "_")
    return typer.Option(flag, envvar=envvar, help=help, min=min, max=max)


def serve(
    host: Annotated[
        str, typer.Option("--host", help="Address to bind (non-loopback needs a token first).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = DEFAULT_PORT,
    db: DbOption = None,
    ray_address: Annotated[
        str | None,
        typer.Option("--ray-address", help="Ray cluster for the scheduler (default: a local Ray)."),
    ] = None,
    device: Annotated[
        list[str] | None,
        typer.Option(
            "--device",
            help="Workers a local Ray starts: auto, interpreter or replay:FILE (repeatable).",
        ),
    ] = None,
    no_scheduler: Annotated[
        bool,
        typer.Option("--no-scheduler", help="Serve the API only (a replica); run no jobs here."),
    ] = False,
    jobs_per_class: Annotated[
        int,
        typer.Option(
            "--jobs-per-class",
            min=1,
            help="Jobs that share one device class's workers at once (slots fair by team).",
        ),
    ] = 8,
    max_jobs: Annotated[
        int | None,
        typer.Option(
            "--max-jobs",
            min=1,
            help="Jobs this server runs at once (default: no bound); the rest wait for others.",
        ),
    ] = None,
    allow_kernel_module: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-kernel-module",
            help="A module whose MODULE:ATTRIBUTE kernels jobs may name (repeatable).",
        ),
    ] = None,
    ssl_certfile: Annotated[
        str | None, typer.Option("--ssl-certfile", help="TLS certificate (PEM).")
    ] = None,
    ssl_keyfile: Annotated[str | None, typer.Option("--ssl-keyfile", help="TLS key (PEM).")] = None,
    max_connections: Annotated[
        int,
        _env_option(
            "--max-connections",
            "Connections served at once; a request beyond them gets 503.",
            min=1,
        ),
    ] = ConnectionLimits.max_connections,
    head_timeout: Annotated[
        float,
        _env_option(
            "--head-timeout",
            "Seconds a client has to send a request's head before it is disconnected.",
            min=0.1,
        ),
    ] = ConnectionLimits.head_timeout_s,
    max_priority: Annotated[
        int,
        _env_option(
            "--max-priority",
            "The largest |priority| a team's job may ask (admin tokens: any).",
            min=0,
            max=1000,
        ),
    ] = TeamCaps.priority,
    max_trials: Annotated[
        int,
        _env_option(
            "--max-trials",
            "The most trials per study a team's job may ask (admin tokens: any).",
            min=1,
        ),
    ] = TeamCaps.trials,
    max_problems: Annotated[
        int,
        _env_option(
            "--max-problems", "The most problems a team's job may name (admin tokens: any).", min=1
        ),
    ] = TeamCaps.problems,
    audit_refusals: Annotated[
        int,
        _env_option(
            "--audit-refusals",
            "Audit rows of refused requests per token and minute (then one summary row).",
            min=0,
        ),
    ] = 10,
    docs: Annotated[
        bool,
        typer.Option(
            "--docs",
            help="Serve the interactive /docs and /redoc pages (their scripts come from this server).",
        ),
    ] = False,
) -> None:
    """Serve the HTTP API (and, unless --no-scheduler, run queued jobs on the Ray cluster)."""
    from orchestrator.run.jobs import DeviceSource

    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise OrchestratorError("TLS needs both --ssl-certfile and --ssl-keyfile")
    sources = tuple(DeviceSource.parse(d) for d in device or ["auto"])
    if not no_scheduler:
        from workers.landscape import read_landscape

        for source in sources:
            for path in source.paths:
                read_landscape(path)  # a bad file is one error line now, not a dead scheduler
    database = open_database(db)
    active = check_exposure(database, host)
    sock = listen(host, port)

    import uvicorn

    from orchestrator.server.app import create_app

    modules = tuple(allow_kernel_module or ())
    scheduler = None
    if not no_scheduler:
        from orchestrator.server.scheduler import Scheduler

        # Its owner id is unique per process (orchestrator.run.lease.default_owner): two servers
        # of one host and port never share a lease; a restarted one takes its jobs over once
        # their leases expire.
        scheduler = Scheduler(
            database,
            ray_address=ray_address,
            devices=sources,
            kernel_modules=modules,
            jobs_per_class=jobs_per_class,
            max_jobs=max_jobs,
        )
    app = create_app(
        database,
        scheduler=scheduler,
        allow_kernel_modules=modules,
        served_devices=tuple(str(s) for s in sources),
        caps=TeamCaps(max_priority, max_trials, max_problems),
        refusals_per_minute=audit_refusals,
        docs=docs,
    )
    limits = ConnectionLimits(max_connections=max_connections, head_timeout_s=head_timeout)
    config = uvicorn.Config(
        app,
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
        log_level="info",
        access_log=False,
        lifespan="off",
        **limits.uvicorn_options(),
    )
    server = uvicorn.Server(config)
    _stop_gracefully(server, scheduler)
    scheme = "https" if ssl_certfile else "http"
    c = console()
    bound = sock.getsockname()[1]
    where = "docs at /docs" if docs else "OpenAPI at /openapi.json"
    c.print(f"tunefleet API on {scheme}://{host}:{bound} ({where}), database {database.url}")
    if active == 0:
        c.print("[bold]no token yet[/]: every request is refused until `tunefleet token create`")
    if scheduler is not None:
        scheduler.start()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        if scheduler is not None:
            scheduler.stop(STOP_TIMEOUT_S)
        database.close()
    sys.stdout.flush()


token_app = typer.Typer(help="Manage the API's bearer tokens.", no_args_is_help=True)


def _team(value: str) -> str:
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
    json_out: JsonOption = False,
) -> None:
    """Create a token and print it once (the database keeps only its SHA-256)."""
    from db import repository
    from db.models import utcnow

    try:
        chosen = TokenScope(scope)
    except ValueError:
        raise OrchestratorError(f"unknown scope {scope!r}; use read, submit or admin") from None
    checked = _team(team)
    database = open_database(db)
    expires_at = None if expires is None else utcnow() + timedelta(days=expires)
    with database.session() as s:
        record, secret = repository.create_token(
            s, checked, chosen, expires_at=expires_at, name=name
        )
        repository.write_audit(
            s, action="token.create", target=f"team {record.team}", detail={"via": "cli"}
        )
    if json_out:
        print_json({"id": record.id, "team": record.team, "scope": chosen.value, "token": secret})
        return
    print(secret)
    print(
        f"token {record.id} for team {record.team} ({chosen.value}"
        + (f", expires {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else "")
        + "); it is shown only now",
        file=sys.stderr,
    )


@token_app.command("list")
def token_list(db: DbOption = None, json_out: JsonOption = False) -> None:
    """List the tokens (never their secrets)."""
    from rich.table import Table

    from db import repository
    from db.models import utcnow

    database = open_database(db)
    with database.session(readonly=True) as s:
        records = repository.list_tokens(s)
    now = utcnow()
    rows = [
        {
            "id": r.id,
            "team": r.team,
            "scope": TokenScope(r.scope).value,
            "name": r.name,
            "state": "revoked"
            if r.revoked_at
            else ("expired" if r.expires_at and r.expires_at <= now else "active"),
            "created_at": r.created_at.isoformat(timespec="seconds"),
            "expires_at": r.expires_at.isoformat(timespec="seconds") if r.expires_at else None,
            "last_used_at": r.last_used_at.isoformat(timespec="seconds")
            if r.last_used_at
            else None,
        }
        for r in records
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
) -> None:
    """Revoke a token; every server refuses it from its next request on."""
    from db import repository

    database = open_database(db)
    with database.session() as s:
        if not repository.revoke_token(s, token_id):
            raise OrchestratorError(f"no active token {token_id}; see `tunefleet token list`")
        repository.write_audit(
            s, action="token.revoke", target=f"token {token_id}", detail={"via": "cli"}
        )
    print(f"token {token_id} revoked")


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``token`` to ``app``."""
    app.command()(serve)
    app.add_typer(token_app, name="token")

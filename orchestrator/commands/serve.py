"""``serve``: the HTTP API and a scheduler (its tokens: orchestrator.commands.tokens).

FastAPI, uvicorn and the scheduler are imported inside ``serve``, so building the CLI stays light.
"""

from __future__ import annotations

import ipaddress
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.commands._common import (
    DbOption,
    console,
    open_database,
)
from orchestrator.commands.tokens import team_name
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
    revalidate_on_change: Annotated[
        bool,
        typer.Option(
            "--revalidate-on-change/--no-revalidate-on-change",
            help="Queue a revalidation job when a worker's stack (driver, runtime, Triton, "
            "torch) differs from the one its class's stored bests were measured in.",
        ),
    ] = True,
    revalidate_every: Annotated[
        float | None,
        typer.Option(
            "--revalidate-every",
            min=0.001,
            help="Also re-time stored bests last checked more than DAYS ago.",
        ),
    ] = None,
    revalidate_quota: Annotated[
        int,
        _env_option(
            "--revalidate-quota",
            "The most revalidation jobs this server queues per team in a day (0: none).",
            min=0,
        ),
    ] = 24,
    revalidate_retune: Annotated[
        list[str] | None,
        typer.Option(
            "--revalidate-retune",
            help="A team (or *) whose regressed and failed bests are tuned again after a "
            "revalidation (repeatable).",
        ),
    ] = None,
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
    from orchestrator.run.stack_watch import ALL_TEAMS, RevalidationPolicy

    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise OrchestratorError("TLS needs both --ssl-certfile and --ssl-keyfile")
    retune = frozenset(t if t == ALL_TEAMS else team_name(t) for t in (revalidate_retune or ()))
    policy = RevalidationPolicy(
        on_change=revalidate_on_change,
        every_days=revalidate_every,
        quota=revalidate_quota,
        retune_teams=retune,
    )
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
            revalidation=policy,
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


def register(app: typer.Typer) -> None:
    """Add ``serve`` to ``app``."""
    app.command()(serve)

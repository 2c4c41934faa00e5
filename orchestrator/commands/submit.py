"""``tunefleet submit``: queue a job for a scheduler, on a tunefleet server or in a database that
a ``tunefleet serve`` runs jobs of."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.commands._common import DbOption, JsonOption
from orchestrator.commands.remote import (
    ServerOption,
    TokenFileOption,
    door_for,
    same_door,
    server_url,
)
from orchestrator.commands.tune import (
    ClassOption,
    CompileTimeoutOption,
    DeviceSourceOption,
    InFlightOption,
    MinutesOption,
    ProblemOption,
    RunTimeoutOption,
    SamplerOption,
    SeedOption,
    SpecObjectiveOption,
    TargetArgument,
    TeamOption,
    TopKOption,
    TrialsOption,
    WatchOption,
    build_spec,
)
from orchestrator.errors import OrchestratorError


def submit(
    target: TargetArgument,
    problem: ProblemOption = None,
    trials: TrialsOption = None,
    minutes: MinutesOption = None,
    sampler: SamplerOption = None,
    device_class: ClassOption = None,
    device: DeviceSourceOption = None,
    seed: SeedOption = None,
    top_k: TopKOption = None,
    team: TeamOption = None,
    in_flight: InFlightOption = None,
    objective: SpecObjectiveOption = None,
    compile_timeout: CompileTimeoutOption = None,
    run_timeout: RunTimeoutOption = None,
    priority: Annotated[
        int, typer.Option(help="Queue priority: higher runs first, equal ones oldest first.")
    ] = 0,
    watch: WatchOption = False,
    server: ServerOption = None,
    token_file: TokenFileOption = None,
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Queue a job (a job file or a kernel with -p problems) for a scheduler: on a tunefleet
    server, or with --db in a database whose `tunefleet serve` runs it."""
    from orchestrator.commands import render
    from orchestrator.run.progress import reporter_for

    spec = build_spec(target, problem, locals())
    if db is None and server_url(server, db) is None:
        raise OrchestratorError(
            "submit queues a job for a scheduler: give --server URL or set TUNEFLEET_SERVER, "
            "or --db URL of a database a `tunefleet serve` runs (`tunefleet tune` runs a job here)"
        )
    with door_for(server, token_file, db) as door:
        detail = door.submit(spec, priority=priority)
        job_id = detail.job.id
        if watch:
            reporter = reporter_for(json_out)
            reporter.note(f"job {job_id} queued {door.where}")
            detail = render.watch(lambda: door.job(job_id), reporter)
        elif not json_out:
            print(
                f"job {job_id}: queued {door.where} (team {detail.job.team}); follow it with "
                f"`tunefleet job {job_id}{same_door(server, db)} --watch`"
            )
            return
    render.show_detail(detail, json_out)


def register(app: typer.Typer) -> None:
    """Add ``submit`` to ``app``."""
    app.command()(submit)

"""``tunefleet submit``: queue a job on a tunefleet server (its scheduler runs it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.commands._common import JsonOption
from orchestrator.commands.remote import ServerOption, TokenFileOption, client_for
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

if TYPE_CHECKING:
    from orchestrator.run.jobs import JobSpec


def job_request(spec: JobSpec) -> dict[str, Any]:
    """The job's fields as a server's ``POST /v1/jobs`` takes them: kernel, problems and every
    field that is not at its default (a server of an older version knows fewer fields)."""
    from orchestrator.run.jobs import JobSpec

    given = spec.to_dict()
    default = JobSpec(spec.kernel, spec.problems).to_dict()
    return {k: v for k, v in given.items() if k in ("kernel", "problems") or v != default[k]}


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
    json_out: JsonOption = False,
) -> None:
    """Queue a job (a job file or a kernel with -p problems) on a tunefleet server."""
    from orchestrator.commands import render
    from orchestrator.run.progress import reporter_for

    spec = build_spec(target, problem, locals())
    client = client_for(server, token_file, None)
    if client is None:
        raise OrchestratorError(
            "submit queues a job on a server: give --server URL or set TUNEFLEET_SERVER "
            "(`tunefleet tune` runs a job here)"
        )
    with client:
        detail = client.submit(job_request(spec), priority=priority)
        job_id = detail.job.id
        if watch:
            reporter = reporter_for(json_out)
            reporter.note(f"job {job_id} queued on {client.url}")
            detail = render.watch(lambda: client.job(job_id), reporter)
        elif not json_out:
            print(
                f"job {job_id}: queued on {client.url} (team {detail.job.team}); follow it with "
                f"`tunefleet job {job_id} --server {client.url} --watch`"
            )
            return
    render.show_detail(detail, json_out)


def register(app: typer.Typer) -> None:
    """Add ``submit`` to ``app``."""
    app.command()(submit)

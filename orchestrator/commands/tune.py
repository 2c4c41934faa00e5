"""Job commands: ``tune``, ``jobs``, ``job``, ``cancel``, ``resume``, ``best``, ``pull``, ``plot``.

Ray, Optuna and the driver are imported inside the commands that need them, so building the CLI
stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from db import JobStatus, Objective
from orchestrator import service
from orchestrator.commands import render
from orchestrator.commands._common import (
    DbOption,
    JobArgument,
    JsonOption,
    KernelArgument,
    open_database,
)
from orchestrator.errors import OrchestratorError
from orchestrator.jobs import JobSpec, load_job_file
from orchestrator.progress import reporter_for
from search_spaces.registry import get_spec

ProblemOption = Annotated[
    list[str] | None,
    typer.Option(
        "--problem", "-p", help="A problem, e.g. M=64,N=64,K=64,dtype=float16 (repeatable)."
    ),
]
ClassOption = Annotated[
    list[str] | None,
    typer.Option("--device-class", help="Device class to tune or show (repeatable; default all)."),
]
RayOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address", help="Ray cluster to use (default: $RAY_ADDRESS, else a local Ray)."
    ),
]


ObjectiveOption = Annotated[
    Objective,
    typer.Option(help="Whose times: kernel (one launch alone) or graph (launches back to back)."),
]
KeepOption = Annotated[
    bool,
    typer.Option(
        "--keep-workers",
        help="Leave the worker actors running on the Ray cluster for the next job "
        "(warm trial processes and compile pools); `tunefleet workers stop` ends them.",
    ),
]


def tune(
    target: Annotated[str, typer.Argument(help="A job file (.yaml/.json) or a kernel name.")],
    problem: ProblemOption = None,
    trials: Annotated[int | None, typer.Option(help="Trials per study (default 30).")] = None,
    minutes: Annotated[float | None, typer.Option(help="Wall-clock budget of the job.")] = None,
    sampler: Annotated[
        str | None, typer.Option(help="local (default), tpe, gp, random, grid, cmaes.")
    ] = None,
    device_class: ClassOption = None,
    device: Annotated[
        list[str] | None,
        typer.Option("--device", help="auto (default), interpreter or replay:FILE (repeatable)."),
    ] = None,
    ray_address: RayOption = None,
    db: DbOption = None,
    seed: Annotated[int | None, typer.Option(help="Sampler seed (default 0).")] = None,
    top_k: Annotated[
        int | None, typer.Option("--top-k", help="Configs re-timed at the end (3).")
    ] = None,
    team: Annotated[str | None, typer.Option(help="Team that owns the job.")] = None,
    in_flight: Annotated[
        int | None,
        typer.Option(
            "--in-flight",
            help="Trials queued per worker (default: one per compile process + 1 on GPUs, else 2).",
        ),
    ] = None,
    objective: Annotated[
        Objective | None,
        typer.Option(help="kernel (default: one launch alone) or graph (launches back to back)."),
    ] = None,
    keep_workers: KeepOption = False,
    json_out: JsonOption = False,
) -> None:
    """Tune a kernel on problems for device classes; store the best configs; print a summary."""
    overrides: dict[str, Any] = {
        k: v
        for k, v in {
            "trials": trials,
            "minutes": minutes,
            "sampler": sampler,
            "device_classes": device_class or None,
            "devices": device or None,
            "seed": seed,
            "top_k": top_k,
            "team": team,
            "in_flight": in_flight,
            "objective": objective.value if objective else None,
        }.items()
        if v is not None
    }
    if target.endswith((".yaml", ".yml", ".json")):
        if problem:
            overrides["problems"] = list(problem)
        spec = load_job_file(target, overrides)
    else:
        if not problem:
            example = get_spec(target).example
            raise OrchestratorError(
                f"give at least one problem, e.g. -p {','.join(f'{k}={v}' for k, v in example.items())}"
            )
        spec = JobSpec.from_mapping({"kernel": target, "problems": list(problem), **overrides})
    if keep_workers:
        service.cluster_address(ray_address)  # fail before touching the database
    summary = service.tune(
        open_database(db),
        spec,
        ray_address=ray_address,
        keep_workers=keep_workers,
        reporter=reporter_for(json_out),
    )
    render.show_summary(summary, json_out)


def resume(
    job: JobArgument,
    ray_address: RayOption = None,
    db: DbOption = None,
    keep_workers: KeepOption = False,
    json_out: JsonOption = False,
) -> None:
    """Continue a job whose driver stopped (killed, failed or cancelled) up to its budget."""
    summary = service.resume_job(
        open_database(db),
        job,
        ray_address=ray_address,
        keep_workers=keep_workers,
        reporter=reporter_for(json_out),
    )
    render.show_summary(summary, json_out)


workers_app = typer.Typer(help="Manage worker actors kept on a Ray cluster.", no_args_is_help=True)


@workers_app.command("stop")
def workers_stop(ray_address: RayOption = None) -> None:
    """End every worker kept by `tune --keep-workers` on the cluster."""
    import ray

    from orchestrator.dispatch import ensure_ray, stop_kept_workers

    ensure_ray(service.cluster_address(ray_address))
    try:
        print(f"stopped {stop_kept_workers()} kept worker(s)")
    finally:
        ray.shutdown()


def cancel(job: JobArgument, db: DbOption = None) -> None:
    """Stop a job: a running one stops dispatching and keeps every finished trial; one that
    nobody runs (queued, or its driver died and its lease expired) is cancelled at once."""
    view = service.cancel_job(open_database(db), job)
    state = "cancelled" if view.status is JobStatus.CANCELLED else "cancel requested"
    print(f"job {job}: {state}")


def jobs(
    team: Annotated[str | None, typer.Option(help="Only this team's jobs.")] = None,
    kernel: Annotated[str | None, typer.Option(help="Only jobs of this kernel.")] = None,
    status: Annotated[JobStatus | None, typer.Option(help="Only jobs in this state.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=service.MAX_LIMIT, help="Jobs shown.")] = 50,
    offset: Annotated[int, typer.Option(min=0, help="Newest jobs skipped.")] = 0,
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """List jobs, newest first: status, trials done of budget, best so far, team, age."""
    page = service.list_jobs(
        open_database(db), team=team, kernel=kernel, status=status, limit=limit, offset=offset
    )
    render.show_jobs(page, json_out)


def job(
    job: JobArgument,
    watch: Annotated[
        bool, typer.Option("--watch", help="Follow the job's progress until it ends.")
    ] = False,
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Show a job: its state and per study the trials done of budget, by outcome, best so far."""
    database = open_database(db)
    if watch:
        render.watch(lambda: service.job_detail(database, job), reporter_for(json_out))
    render.show_detail(service.job_detail(database, job), json_out)


def best(
    kernel: KernelArgument,
    problem: ProblemOption = None,
    device_class: ClassOption = None,
    objective: ObjectiveOption = Objective.KERNEL,
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Best stored configs of the installed version of a kernel, for one timing objective."""
    spec = get_spec(kernel)
    database = open_database(db)
    problems: list[str | None] = list(problem or []) or [None]
    classes: list[str | None] = list(device_class or []) or [None]
    rows = [
        row
        for p in problems
        for c in classes
        for row in service.best_configs(
            database, kernel=spec.name, device_class=c, objective=objective, problem=p
        )
    ]
    render.show_best(spec.name, spec.version_hash(), objective, rows, json_out)


def pull(
    kernel: KernelArgument,
    out: Annotated[Path, typer.Option("--out", help="Folder to write the bundle files to.")],
    device_class: ClassOption = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="native (JSON bundle), triton (Python), vllm (fused_moe files)."
        ),
    ] = "native",
    objective: ObjectiveOption = Objective.KERNEL,
    db: DbOption = None,
) -> None:
    """Export best configs as bundle files a deployment loads (no tuning at run time)."""
    from orchestrator.vllm_export import write_files

    files = service.bundle_files(
        open_database(db), kernel, device_classes=device_class or [], objective=objective, fmt=fmt
    )
    for path in write_files([(f.filename, f.content.decode()) for f in files], out):
        print(path)


def plot(
    job: JobArgument,
    out: Annotated[Path, typer.Option("--out", help="Folder for the PNG and HTML files.")],
    db: DbOption = None,
) -> None:
    """Convergence and parameter importance per study of a job, as PNG and HTML."""
    from orchestrator.plot import plot_job

    for path in plot_job(open_database(db), job, out):
        print(path)


def register(app: typer.Typer) -> None:
    """Add the job commands to ``app``."""
    for command in (tune, jobs, job, cancel, resume, best, pull, plot):
        app.command()(command)
    app.add_typer(workers_app, name="workers")

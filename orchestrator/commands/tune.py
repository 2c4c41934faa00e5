"""Job commands: ``tune``, ``jobs``, ``job``, ``cancel``, ``resume``, ``best``, ``pull``, ``plot``.

Ray, Optuna and the driver are imported inside the commands that need them, so building the CLI
stays light.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from db import Objective, repository
from orchestrator import samplers
from orchestrator.commands._common import (
    DbOption,
    JobArgument,
    JsonOption,
    KernelArgument,
    console,
    open_database,
    print_json,
)
from orchestrator.errors import OrchestratorError
from orchestrator.jobs import JobSpec, load_job_file
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec, spec_from_storage
from workers.device_table import canonical_class_key

if TYPE_CHECKING:
    from db import Database

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
KernelModuleOption = Annotated[
    list[str] | None,
    typer.Option(
        "--kernel-module",
        help="Import this MODULE:ATTRIBUTE (or MODULE) if the job names it: a job row never "
        "makes tunefleet import code you did not name (repeatable).",
    ),
]


def _cluster_address(ray_address: str | None) -> str:
    address = ray_address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise OrchestratorError(
            "kept workers need a running Ray cluster: start one with `ray start --head` and give "
            "--ray-address or RAY_ADDRESS (a local Ray ends with the command)"
        )
    return address


def _run(
    database: Database,
    spec: JobSpec,
    job_id: int | None,
    ray_address: str | None,
    json_out: bool,
    keep: bool = False,
) -> int:
    """Start (or, with ``keep``, find) workers, submit (or resume) the job, drive it, print the
    summary; return its id."""
    import ray

    from orchestrator.dispatch import PoolOptions, WorkerPool, ensure_ray, plans_for
    from orchestrator.driver import Driver, submit_job
    from orchestrator.progress import reporter_for

    started = ensure_ray(_cluster_address(ray_address) if keep else ray_address)
    pool = None
    try:
        options = PoolOptions(
            in_flight=spec.in_flight, graph=spec.objective is Objective.GRAPH, keep=keep
        )
        pool = WorkerPool(plans_for(spec.devices, options), options)
        if job_id is None:
            job_id = submit_job(database, spec, pool)
        reporter = reporter_for(json_out)
        timed = "" if spec.objective is Objective.KERNEL else ", objective graph (back to back)"
        reporter.note(
            f"job {job_id}: {spec.kernel}, {len(spec.problems)} problem(s){timed}; "
            f"cancel with `tunefleet cancel {job_id}`"
        )
        Driver(database, pool, reporter=reporter).run(job_id)
    finally:
        if pool is not None:
            pool.shutdown()
        if started:
            ray.shutdown()
    _show_summary(database, job_id, json_out)
    return job_id


def _show_summary(
    database: Database, job_id: int, json_out: bool, kernel_modules: Sequence[str] = ()
) -> None:
    from orchestrator.summary import collect, render

    summary = collect(database, job_id, kernel_modules)
    if json_out:
        print_json(summary)
    else:
        render(summary, console())


def tune(
    target: Annotated[str, typer.Argument(help="A job file (.yaml/.json) or a kernel name.")],
    problem: ProblemOption = None,
    trials: Annotated[int | None, typer.Option(help="Trials per study (default 30).")] = None,
    minutes: Annotated[float | None, typer.Option(help="Wall-clock budget of the job.")] = None,
    sampler: Annotated[
        str | None, typer.Option(help=f"Search strategy; {samplers.help_text()}")
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
    compile_timeout: Annotated[
        float | None,
        typer.Option("--compile-timeout", help="Seconds a trial may compile (default 120)."),
    ] = None,
    run_timeout: Annotated[
        float | None,
        typer.Option("--run-timeout", help="Seconds a trial may check and time (default 60)."),
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
            "compile_timeout_s": compile_timeout,
            "run_timeout_s": run_timeout,
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
        _cluster_address(ray_address)  # fail before touching the database
    _run(open_database(db), spec, None, ray_address, json_out, keep_workers)


def resume(
    job: JobArgument,
    ray_address: RayOption = None,
    db: DbOption = None,
    keep_workers: KeepOption = False,
    kernel_module: KernelModuleOption = None,
    json_out: JsonOption = False,
) -> None:
    """Continue a job whose driver stopped (killed, failed or cancelled) up to its budget."""
    if keep_workers:
        _cluster_address(ray_address)
    database = open_database(db)
    with database.session(readonly=True) as s:
        record = repository.get_job(s, job)
    spec_from_storage(
        str(record.spec.get("kernel")), kernel_module or ()
    )  # imports nothing unasked
    _run(database, JobSpec.from_mapping(record.spec), job, ray_address, json_out, keep_workers)


workers_app = typer.Typer(help="Manage worker actors kept on a Ray cluster.", no_args_is_help=True)


@workers_app.command("stop")
def workers_stop(ray_address: RayOption = None) -> None:
    """End every worker kept by `tune --keep-workers` on the cluster."""
    import ray

    from orchestrator.dispatch import ensure_ray, stop_kept_workers

    ensure_ray(_cluster_address(ray_address))
    try:
        print(f"stopped {stop_kept_workers()} kept worker(s)")
    finally:
        ray.shutdown()


def cancel(job: JobArgument, db: DbOption = None) -> None:
    """Ask a running job to stop: its driver stops dispatching and keeps every finished trial."""
    database = open_database(db)
    with database.session() as s:
        repository.request_cancel(s, job)
    print(f"job {job}: cancel requested")


def jobs(db: DbOption = None, json_out: JsonOption = False) -> None:
    """List the newest jobs."""
    from rich.table import Table

    database = open_database(db)
    with database.session(readonly=True) as s:
        records = repository.list_jobs(s)
    rows = [
        {
            "job": r.id,
            "kernel": r.kernel_name,
            "status": r.status.value,
            "team": r.team,
            "problems": len(r.spec.get("problems", [])),
            "objective": r.objective.value,
            "created_at": r.created_at.isoformat(timespec="seconds"),
            "error": r.error,
        }
        for r in records
    ]
    if json_out:
        print_json({"jobs": rows})
        return
    table = Table(title="jobs")
    for column in (
        "job",
        "kernel",
        "status",
        "team",
        "problems",
        "objective",
        "created_at",
        "error",
    ):
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row.values()))
    console().print(table)


def job(
    job: JobArgument,
    db: DbOption = None,
    kernel_module: KernelModuleOption = None,
    json_out: JsonOption = False,
) -> None:
    """Show a job's summary: best config per (problem, class) and trials by outcome."""
    _show_summary(open_database(db), job, json_out, kernel_module or ())


def best(
    kernel: KernelArgument,
    problem: ProblemOption = None,
    device_class: ClassOption = None,
    objective: ObjectiveOption = Objective.KERNEL,
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Best stored configs of the installed version of a kernel, for one timing objective."""
    from rich.table import Table

    spec = get_spec(kernel)
    keys: list[str | None] = [problem_key(spec.parse_problem(p)) for p in problem or []] or [None]
    classes: list[str | None] = [canonical_class_key(c) for c in device_class or []] or [None]
    database = open_database(db)
    with database.session(readonly=True) as s:
        records = [
            r
            for pk in keys
            for ck in classes
            for r in repository.get_best(
                s, spec.name, pk, ck, spec.version_hash(), objective=objective
            )
        ]
    rows: list[dict[str, Any]] = [
        {
            "problem": problem_key_to_dict(r.problem_key),
            "device_class": r.device_class_key,
            "triton": r.triton_minor,
            "objective": r.objective.value,
            "config": r.config,
            "time_ms": r.time_ms,
            "job": r.job_id,
        }
        for r in records
    ]
    if json_out:
        print_json({"kernel": spec.name, "kernel_version": spec.version_hash(), "best": rows})
        return
    if not rows:
        print(
            f"no best configs stored for {spec.name} version {spec.version_hash()} "
            f"(objective {objective.value})",
            file=sys.stderr,
        )
        return
    table = Table(title=f"best configs · {spec.name} {spec.version_hash()} · {objective.value}")
    for column in ("problem", "class", "triton", "config", "time (ms)", "job"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            ",".join(f"{k}={v}" for k, v in row["problem"].items()),
            row["device_class"],
            row["triton"],
            ",".join(f"{k}={v}" for k, v in row["config"].items()),
            f"{row['time_ms']:.4g}",
            str(row["job"]),
        )
    console().print(table)


def problem_key_to_dict(key: str) -> dict[str, Any]:
    import json

    value = json.loads(key)
    return dict(value) if isinstance(value, dict) else {}


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
    from orchestrator.bundle_export import BundleFormat, export

    try:
        chosen = BundleFormat(fmt)
    except ValueError:
        raise OrchestratorError(f"unknown format {fmt!r}; use native, triton or vllm") from None
    classes = [canonical_class_key(c) for c in device_class or []]
    for path in export(open_database(db), kernel, out, classes, chosen, objective):
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

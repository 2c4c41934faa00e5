"""Job commands: ``tune``, ``jobs``, ``job``, ``cancel``, ``resume``, ``best``, ``pull``, ``plot``.

Each command but ``tune`` goes through the door ``door_for`` picks (a server or the database,
orchestrator.commands.remote) and is written once against it; ``tune`` runs here and refuses
while a server is in effect. Ray, Optuna, the driver, the service layer (SQLAlchemy), rich and the
kernel registry are imported inside the commands that need them, so building the CLI stays light.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from db.states import JobStatus, Objective
from orchestrator.commands._common import (
    DbOption,
    DevicesOption,
    JobArgument,
    JsonOption,
    KernelArgument,
    WideOption,
    open_database,
    print_json,
)
from orchestrator.commands.remote import (
    ServerOption,
    TokenFileOption,
    door_for,
    local_only,
    same_door,
)
from orchestrator.errors import OrchestratorError
from orchestrator.study.samplers import BUILTINS, DEFAULT

if TYPE_CHECKING:
    from orchestrator.run.jobs import JobSpec
    from search_spaces.bundle import Bundle

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
        help="Leave the worker actors running on the Ray cluster for your next job "
        "(warm trial processes and compile pools); `tunefleet workers stop` ends yours.",
    ),
]


TargetArgument = Annotated[str, typer.Argument(help="A job file (.yaml/.json) or a kernel name.")]
OptionalTargetArgument = Annotated[
    str | None, typer.Argument(help="A job file (.yaml/.json) or a kernel name.")
]
FromCaptureOption = Annotated[
    Path | None,
    typer.Option(
        "--from-capture",
        help="Tune every kernel `tunefleet capture` recorded in DIR, one job each, with no spec. "
        "Imports the app's modules (runs your code): tune only captures you trust.",
    ),
]
WidenOption = Annotated[
    bool,
    typer.Option(
        help="With --from-capture: search each parameter's observed values and their "
        "neighbours, not only the kernel's own config list."
    ),
]
TrialsOption = Annotated[int | None, typer.Option(help="Trials per study (default 30).")]
MinutesOption = Annotated[float | None, typer.Option(help="Wall-clock budget of the job.")]
#: The built-in samplers' help (plug-ins are not loaded to build the CLI: an unknown name lists
#: every installed sampler).
SAMPLER_HELP = (
    "Search strategy; "
    + "; ".join(
        f"{e.name}: {e.help}" for e in sorted(BUILTINS, key=lambda e: (e.name != DEFAULT, e.name))
    )
    + "; or a sampler a package installs (tunefleet.samplers entry point)."
)
SamplerOption = Annotated[str | None, typer.Option(help=SAMPLER_HELP)]
DeviceSourceOption = DevicesOption
SeedOption = Annotated[int | None, typer.Option(help="Sampler seed (default 0).")]
TopKOption = Annotated[int | None, typer.Option("--top-k", help="Configs re-timed at the end (3).")]
TeamOption = Annotated[str | None, typer.Option(help="Team that owns the job.")]
InFlightOption = Annotated[
    int | None,
    typer.Option(
        "--in-flight",
        help="Trials queued per worker (default: one per compile process + 1 on GPUs, else 2).",
    ),
]
SpecObjectiveOption = Annotated[
    Objective | None,
    typer.Option(help="kernel (default: one launch alone) or graph (launches back to back)."),
]
CompileTimeoutOption = Annotated[
    float | None,
    typer.Option("--compile-timeout", help="Seconds a trial may compile (default 120)."),
]
RunTimeoutOption = Annotated[
    float | None,
    typer.Option("--run-timeout", help="Seconds a trial may check and time (default 60)."),
]
KernelModuleOption = Annotated[
    list[str] | None,
    typer.Option(
        "--kernel-module",
        help="Import this MODULE:ATTRIBUTE (or MODULE) if the job names it: a job row never "
        "makes tunefleet import code you did not name (repeatable).",
    ),
]


WatchOption = Annotated[
    bool, typer.Option("--watch", help="Follow the job's progress until it ends.")
]


#: The job-spec parameters ``tune`` and ``submit`` share: parameter name -> job file field.
SPEC_FIELDS = {
    "trials": "trials",
    "minutes": "minutes",
    "sampler": "sampler",
    "device_class": "device_classes",
    "device": "devices",
    "seed": "seed",
    "top_k": "top_k",
    "team": "team",
    "in_flight": "in_flight",
    "objective": "objective",
    "compile_timeout": "compile_timeout_s",
    "run_timeout": "run_timeout_s",
}


def spec_overrides(values: Mapping[str, Any]) -> dict[str, Any]:
    """The SPEC_FIELDS a command line gave in ``values`` (None or empty: not given)."""
    return {
        field: value.value if isinstance(value, Objective) else value
        for name, field in SPEC_FIELDS.items()
        if (value := values.get(name)) not in (None, [])
    }


def build_spec(target: str, problem: list[str] | None, values: Mapping[str, Any]) -> JobSpec:
    """The job of a command line: a job file with the SPEC_FIELDS given in ``values`` over its
    own, or a kernel name with its ``-p`` problems (values that are None or empty are not given)."""
    from orchestrator.run.jobs import JobSpec, load_job_file
    from search_spaces.registry import get_spec

    overrides = spec_overrides(values)
    if target.endswith((".yaml", ".yml", ".json")):
        if problem:
            overrides["problems"] = list(problem)
        return load_job_file(target, overrides)
    if not problem:
        example = get_spec(target).example
        raise OrchestratorError(
            f"give at least one problem, e.g. -p {','.join(f'{k}={v}' for k, v in example.items())}"
        )
    return JobSpec.from_mapping({"kernel": target, "problems": list(problem), **overrides})


def tune(
    target: OptionalTargetArgument = None,
    problem: ProblemOption = None,
    trials: TrialsOption = None,
    minutes: MinutesOption = None,
    sampler: SamplerOption = None,
    device_class: ClassOption = None,
    device: DeviceSourceOption = None,
    ray_address: RayOption = None,
    db: DbOption = None,
    seed: SeedOption = None,
    top_k: TopKOption = None,
    team: TeamOption = None,
    in_flight: InFlightOption = None,
    objective: SpecObjectiveOption = None,
    compile_timeout: CompileTimeoutOption = None,
    run_timeout: RunTimeoutOption = None,
    keep_workers: KeepOption = False,
    json_out: JsonOption = False,
    from_capture: FromCaptureOption = None,
    widen: WidenOption = False,
    json_lines: Annotated[
        bool,
        typer.Option(
            "--json-lines",
            help="Stream one JSON object per line (study, trial, note, summary) for scripts.",
        ),
    ] = False,
) -> None:
    """Tune a kernel on problems for device classes; store the best configs; print a summary."""
    import sys

    from orchestrator.app import running
    from orchestrator.app.jobs import check_spec
    from orchestrator.commands import render
    from orchestrator.run.checks import replay_coverage
    from orchestrator.run.progress import JsonLinesReporter, reporter_for

    local_only("tune", db)
    if json_out and json_lines:
        raise OrchestratorError("give --json or --json-lines, not both")
    if keep_workers:
        running.cluster_address(ray_address)  # fail before touching the database
    if from_capture is not None:
        if target is not None or problem:
            raise OrchestratorError("--from-capture takes no job file, kernel or -p problems")
        from orchestrator.app.capture_jobs import run_capture

        database = open_database(db)

        def run_one(job: JobSpec) -> int:
            summary = running.tune(
                database,
                job,
                ray_address=ray_address,
                keep_workers=keep_workers,
                reporter=reporter_for(json_out),
            )
            render.show_summary(summary, json_out)
            return summary.job_id

        run_capture(from_capture, widen, spec_overrides(locals()), run_one, ray_address)
        return
    if target is None:
        raise OrchestratorError("give a job file or a kernel name, or --from-capture DIR")
    spec = build_spec(target, problem, locals())
    kernel = check_spec(spec)  # before Ray starts or the database is touched
    stream = JsonLinesReporter() if json_lines else None
    for coverage in replay_coverage(spec, kernel):
        if not coverage.complete:
            if stream is not None:
                stream.note(coverage.warning(kernel.name))
            else:
                print(coverage.warning(kernel.name), file=sys.stderr)
    summary = running.tune(
        open_database(db),
        spec,
        ray_address=ray_address,
        keep_workers=keep_workers,
        reporter=stream or reporter_for(json_out),
    )
    if stream is not None:
        stream.summary(summary.to_dict())
    else:
        render.show_summary(summary, json_out)


def resume(
    job: JobArgument,
    ray_address: RayOption = None,
    db: DbOption = None,
    keep_workers: KeepOption = False,
    kernel_module: KernelModuleOption = None,
    server: ServerOption = None,
    token_file: TokenFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Continue a job whose driver stopped (killed, failed or cancelled) up to its budget: here,
    now, on the database; or, with a server, queued again for its scheduler."""
    from orchestrator.app.protocol import RunHere
    from orchestrator.commands import render
    from orchestrator.run.progress import reporter_for

    here = RunHere(ray_address, keep_workers, tuple(kernel_module or ()))
    with door_for(server, token_file, db) as door:
        resumed = door.resume(job, here=here, reporter=reporter_for(json_out))
        if resumed.summary is not None:
            render.show_summary(resumed.summary, json_out)
        elif json_out:
            render.show_detail(resumed.job, json_out)
        else:
            print(
                f"job {job}: {resumed.job.job.status.value} {door.where}; follow it with "
                f"`tunefleet job {job}{same_door(server, db)} --watch`"
            )


workers_app = typer.Typer(help="Manage worker actors kept on a Ray cluster.", no_args_is_help=True)


@workers_app.command("stop")
def workers_stop(
    ray_address: RayOption = None,
    owner: Annotated[
        str | None,
        typer.Option(help="Whose kept workers to stop (default: yours, the user running this)."),
    ] = None,
) -> None:
    """End the workers kept by your `tune --keep-workers` jobs on the cluster (another owner's
    are left alone)."""
    import ray

    from orchestrator.app import running
    from orchestrator.run.dispatch import ensure_ray, stop_kept_workers

    ensure_ray(running.cluster_address(ray_address))
    try:
        print(f"stopped {stop_kept_workers(owner=owner)} kept worker(s)")
    finally:
        ray.shutdown()


def cancel(
    job: JobArgument,
    db: DbOption = None,
    server: ServerOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Stop a job: a running one stops dispatching and keeps every finished trial; one that
    nobody runs (queued, or its driver died and its lease expired) is cancelled at once."""
    with door_for(server, token_file, db) as door:
        view = door.cancel(job)
    state = "cancelled" if view.status is JobStatus.CANCELLED else "cancel requested"
    print(f"job {job}: {state}")


def jobs(
    team: Annotated[str | None, typer.Option(help="Only this team's jobs.")] = None,
    kernel: Annotated[str | None, typer.Option(help="Only jobs of this kernel.")] = None,
    status: Annotated[JobStatus | None, typer.Option(help="Only jobs in this state.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Jobs shown.")] = 50,
    offset: Annotated[int, typer.Option(min=0, help="Newest jobs skipped.")] = 0,
    before: Annotated[
        int | None,
        typer.Option(min=1, help="Only jobs below this id (the listing's next_before)."),
    ] = None,
    db: DbOption = None,
    server: ServerOption = None,
    token_file: TokenFileOption = None,
    json_out: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """List jobs, newest first: status, trials done of budget, best so far, team, age."""
    from orchestrator.commands import render

    with door_for(server, token_file, db) as door:
        page = door.jobs(
            team=team, kernel=kernel, status=status, limit=limit, offset=offset, before=before
        )
    render.show_jobs(page, json_out, wide)


def job(
    job: JobArgument,
    watch: WatchOption = False,
    db: DbOption = None,
    server: ServerOption = None,
    token_file: TokenFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Show a job: its state and per study the trials done of budget, by outcome, best so far."""
    from orchestrator.commands import render
    from orchestrator.run.progress import reporter_for

    with door_for(server, token_file, db) as door:
        detail = (
            render.watch(lambda: door.job(job), reporter_for(json_out)) if watch else door.job(job)
        )
    render.show_detail(detail, json_out)


def best(
    kernel: KernelArgument,
    problem: ProblemOption = None,
    device_class: ClassOption = None,
    objective: ObjectiveOption = Objective.KERNEL,
    db: DbOption = None,
    server: ServerOption = None,
    token_file: TokenFileOption = None,
    json_out: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """Best stored configs of the installed version of a kernel, for one timing objective."""
    from orchestrator.commands import render

    problems: list[str | None] = list(problem or []) or [None]
    classes: list[str | None] = list(device_class or []) or [None]
    with door_for(server, token_file, db) as door:
        found = [
            door.best(kernel, device_class=c, objective=objective, problem=p)
            for p in problems
            for c in classes
        ]
    rows = [row for listed in found for row in listed.items]
    first = found[0]
    render.show_best(first.kernel, first.kernel_version, objective, rows, json_out, wide)


def _bundle_texts(
    kernel: str,
    device_class: list[str] | None,
    objective: Objective,
    formats: tuple[str, ...],
    db: str | None,
    server: str | None,
    token_file: Path | None,
) -> tuple[list[list[tuple[str, str]]], list[Any]]:
    """``pull``'s files (name, text) per format in ``formats`` and the best configs they hold
    (for the cancelled-job note), through the door of ``db`` / ``server``."""
    classes: list[str | None] = list(device_class or []) or [None]
    with door_for(server, token_file, db) as door:
        texts = [
            door.bundle_files(kernel, device_classes=device_class or [], objective=objective, fmt=f)
            for f in formats
        ]
        bests: list[Any] = [
            b for c in classes for b in door.best(kernel, device_class=c, objective=objective).items
        ]
    return [[(f.filename, f.content.decode()) for f in files] for files in texts], bests


def _vllm_report(
    native: list[tuple[str, str]], bundles: list[Bundle]
) -> tuple[list[dict[str, Any]], list[str]]:
    """``pull --format vllm``'s ``skipped`` rows (entries of the native bundles that vLLM's kernel
    cannot run as measured, left out of its files) and its stderr notes: the M left out per
    (class, N, K), the M written with a fallback config (with both times) and how many written
    rows the vendor path won (orchestrator.export.vllm). ``bundles``: ``native`` loaded."""
    from orchestrator.export.report import triton_ms
    from orchestrator.export.vllm import (
        FALLBACK_NOTE,
        SKIPPED_NOTE,
        VENDOR_POLICY,
        VLLM_ENTRY,
        vllm_entries,
        vllm_skipped,
    )

    def shape_on(problem: Mapping[str, Any], device_class: str) -> str:
        experts = f"E={problem['E']}," if "E" in problem else ""
        return f"{experts}N={problem['N']},K={problem['K']} on {device_class}"

    skipped: list[dict[str, Any]] = []
    left_out: dict[str, list[str]] = {}
    fallen_back: dict[str, list[str]] = {}
    vendor_rows = 0
    for (_, text), bundle in zip(native, bundles, strict=True):
        doc = json.loads(text)
        entries = doc["entries"]
        dropped = vllm_skipped(doc["kernel"], vllm_entries(entries))
        for problem, reason in dropped:
            skipped.append(
                {"device_class": doc["device_class"], "problem": problem, "reason": reason}
            )
            left_out.setdefault(shape_on(problem, doc["device_class"]), []).append(
                f"M={problem['M']} ({reason})"
            )
        for e, parsed in zip(entries, bundle.entries, strict=True):
            if VLLM_ENTRY in e:
                best = triton_ms(parsed)
                fallen_back.setdefault(shape_on(e["problem"], doc["device_class"]), []).append(
                    f"M={e['problem']['M']} {e[VLLM_ENTRY]['time_ms']:.4g} ms vs "
                    + ("-" if best is None else f"{best:.4g}")
                )
        left = [problem for problem, _ in dropped]
        vendor_rows += sum(e["backend"] == "vendor" and e["problem"] not in left for e in entries)
    notes = [
        SKIPPED_NOTE.format(where=where, rows=", ".join(rows)) for where, rows in left_out.items()
    ]
    notes += [
        FALLBACK_NOTE.format(where=where, rows=", ".join(rows))
        for where, rows in fallen_back.items()
    ]
    if vendor_rows:
        notes.append(VENDOR_POLICY.format(rows=vendor_rows))
    return skipped, notes


def pull(
    kernel: KernelArgument,
    out: Annotated[Path, typer.Option("--out", help="Folder to write the bundle files to.")],
    device_class: ClassOption = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="native (JSON bundle), triton (Python), vllm (fused_moe and fp8_matmul files), "
            "t4 (Kernel Tuner's T4 results JSON).",
        ),
    ] = "native",
    objective: ObjectiveOption = Objective.KERNEL,
    by_stack: Annotated[
        bool,
        typer.Option(
            "--by-stack",
            help="Write each file under a folder per Triton version (triton_3_6_0/, or "
            "triton_3_6/ when the patch is unknown), the layout vLLM and SGLang use; the "
            "drop-in autotune reads the installed Triton's folder.",
        ),
    ] = False,
    json_out: JsonOption = False,
    db: DbOption = None,
    server: ServerOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Export best configs as bundle files a deployment loads (no tuning at run time).

    A native bundle pulled into a folder that holds one for the same kernel version, class and
    triton minor is merged with it, newer measurement per key winning (orchestrator.export.merge);
    files are written whole or not at all. Prints the written paths (with ``--json``, one object:
    ``files`` and ``bundles``, the dispatch policy's measured outcome per native bundle written,
    see orchestrator.export.report, and with ``--format vllm`` ``skipped``: the entries vLLM's
    kernel cannot run as measured, left out of its files); a ``policy`` line per bundle with vendor
    measurements, a note per bundle merged or replaced and per vLLM file with skipped M go to
    stderr. ``--by-stack`` puts each file under its Triton version's folder (search_spaces.stack),
    one per triton minor pulled.
    """
    import sys

    from orchestrator.commands.render import cancelled_note
    from orchestrator.export.merge import merge_into_folder, write_atomically
    from orchestrator.export.report import policy_report, summary_line
    from search_spaces.bundle import bundle_from_dict

    t4 = fmt == "t4"
    if t4:
        fmt = "native"  # T4 files are written from the native bundles
    from orchestrator.export import bundle as bundle_export

    if fmt == "vllm":
        bundle_export.vllm_writer(kernel)  # refused before any read
    # vLLM's files are made here from the native bundles (one read of the fallback trials)
    formats = ("native",) if fmt in ("native", "vllm") else (fmt, "native")
    texts, bests = _bundle_texts(kernel, device_class, objective, formats, db, server, token_file)
    named, native = texts[0], texts[-1]
    if fmt == "vllm":
        named = bundle_export.vllm_bundle_files([json.loads(text) for _, text in native])
    if by_stack:
        named = bundle_export.by_stack(bundle_export.BundleFormat(fmt), named, native)
    merges: list[str] = []
    if fmt == "native" and not t4:
        named, merges = merge_into_folder(named, out)
        native = named
    bundles = [bundle_from_dict(json.loads(text), name) for name, text in native]
    reports = [policy_report(bundle) for bundle in bundles]
    if t4:
        from orchestrator.export.t4 import bundle_t4

        named = [
            (
                f"{Path(name).with_suffix('')}.t4.json",
                json.dumps(bundle_t4(json.loads(text)), indent=1),
            )
            for name, text in named
        ]
    skipped, vllm_notes = _vllm_report(native, bundles) if fmt == "vllm" else ([], [])
    paths = write_atomically(named, out)
    if json_out:
        result: dict[str, Any] = {"files": [str(p) for p in paths], "bundles": reports}
        if fmt == "vllm":
            result["skipped"] = skipped
        print_json(result)
    else:
        for path in paths:
            print(path)
    for merge in merges:
        print(f"note: {merge}", file=sys.stderr)
    for report in reports:
        if report["measured"] or report["vendor"]:
            print(summary_line(report), file=sys.stderr)
    for line in vllm_notes:
        print(f"note: {line}", file=sys.stderr)
    note = cancelled_note(bests)
    if note:
        print(f"note: {note}", file=sys.stderr)


def plot(
    job: JobArgument,
    out: Annotated[Path, typer.Option("--out", help="Folder for the PNG and HTML files.")],
    db: DbOption = None,
    server: ServerOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Convergence and parameter importance per study of a job, as PNG and HTML."""
    from orchestrator.app.plot import write_plot

    with door_for(server, token_file, db) as door:
        data = door.plot_data(job)
    for path in write_plot(data, out):
        print(path)


def register(app: typer.Typer) -> None:
    """Add the job commands to ``app``."""
    for command in (tune, jobs, job, cancel, resume, best, pull, plot):
        app.command()(command)
    app.add_typer(workers_app, name="workers")

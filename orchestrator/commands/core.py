"""Core commands: ``kernels``, ``space``, ``devices``, ``trial``, ``record`` and ``db upgrade``."""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.commands._common import (
    DbOption,
    DeviceOption,
    JsonOption,
    KernelArgument,
    WideOption,
    check_device,
    console,
    parse_device,
    print_json,
)
from orchestrator.commands.tables import Column, print_table
from orchestrator.errors import OrchestratorError

if TYPE_CHECKING:
    from search_spaces import Config, DeviceLimits, KernelSpec
    from workers.device import Fingerprint
    from workers.measurement import Measurement


def resolve_config(spec: KernelSpec, text: str, limits: DeviceLimits) -> Config:
    """``default`` or ``NAME=VALUE,...`` (unnamed parameters from the default), checked on ``limits``."""
    config = spec.default_for(limits)
    if text.strip() != "default":
        config.update(spec.space.parse(text, limits.vendor))
    return spec.space.validate(config, limits)


def read_configs(spec: KernelSpec, path: Path, limits: DeviceLimits) -> list[Config]:
    """The configs of a ``--configs`` file (one ``NAME=VALUE,...`` per line), each checked on
    ``limits``; ConfigError names the line of the first bad one."""
    from search_spaces import ConfigError

    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise OrchestratorError(f"cannot read --configs {path}: {exc.strerror or exc}") from None
    configs: list[Config] = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            configs.append(resolve_config(spec, text, limits))
        except ConfigError as exc:
            raise ConfigError(f"{path}:{number}: {exc}") from None
    if not configs:
        raise OrchestratorError(
            f"--configs {path} names no config; put one NAME=VALUE,... per line"
        )
    return configs


def _rate(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def kernels(json_out: JsonOption = False, wide: WideOption = False) -> None:
    """List the kernels that can be tuned, with their problem schema and an example problem."""
    from orchestrator.app.kernels import list_kernels

    views = list_kernels()
    if json_out:
        print_json({"kernels": [v.to_dict() for v in views]})
        return
    columns = [
        Column("kernel"),
        Column("description"),
        Column("problem", essential=False),
        Column("example"),
    ]
    # ", " lets a long problem wrap between fields (-p accepts the spaces).
    rows = [
        [v.name, v.description, v.usage.replace(",", ", "), _problem_text(v.example)] for v in views
    ]
    print_table(columns, rows, wide=wide)


def _problem_text(problem: Mapping[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in problem.items())


def space(
    kernel: KernelArgument,
    device_class: Annotated[
        str | None,
        typer.Option("--device-class", help="Known class, e.g. H200 or MI300X (default: local)."),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Show a kernel's search space on a device class: parameters, constraints, default, counts."""
    from rich.table import Table

    from orchestrator.app.kernels import kernel_space

    view = kernel_space(kernel, device_class)
    if json_out:
        print_json(view.to_dict())
        return
    c = console()
    c.print(
        f"[bold]{view.kernel}[/] on {view.device_class}: {view.valid} valid of {view.total} configs"
    )
    table = Table("parameter", "values")
    for name, values in view.parameters.items():
        table.add_row(name, ", ".join(map(str, values)))
    c.print(table)
    for rule in view.constraints:
        c.print(f"  rule {rule['name']}: {rule['rule']}")
    c.print("  default: " + ",".join(f"{k}={v}" for k, v in view.default.items()))


KNOWN_COLUMNS = {
    "name": Column("name"),
    "vendor": Column("vendor", essential=False),
    "arch": Column("arch"),
    "aliases": Column("aliases", essential=False),
    "shared_mem_per_block": Column("shared mem per block", essential=False, justify="right"),
    "registers_per_block": Column("registers per block", essential=False, justify="right"),
    "warp_size": Column("warp size", essential=False, justify="right"),
    "multiprocessors": Column("multiprocessors", short="SMs/CUs", justify="right"),
    "max_threads_per_block": Column("max threads per block", essential=False, justify="right"),
    # Not essential: with both peaks, 80 columns hold every name on one line only without it.
    "memory_bytes": Column("memory GB", short="GB", essential=False, justify="right"),
    "memory_bandwidth_gbs": Column("memory bandwidth GB/s", short="GB/s", justify="right"),
    "bf16_tflops": Column("bf16 dense TFLOP/s", short="TFLOP/s", justify="right"),
    "fp8_tflops": Column("fp8 dense TFLOP/s", short="FP8 TF/s", justify="right"),
    "ray_accelerator": Column("Ray accelerator type", essential=False),
    "source": Column("source", essential=False),
}


def _known_cell(key: str, value: object) -> str:
    if value is None:
        return "-"
    if key == "memory_bytes" and isinstance(value, int):
        return f"{value / 1e9:.0f}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def devices(
    known: Annotated[
        bool, typer.Option("--known", help="List the known device classes instead.")
    ] = False,
    json_out: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """List local devices with their fingerprints (or, with --known, the known device classes)."""
    if known:
        from workers.device_table import KNOWN_CLASSES

        rows = [k.to_dict() for k in KNOWN_CLASSES]
        if json_out:
            print_json({"known": rows})
            return
        keys = list(KNOWN_COLUMNS)
        assert keys == list(rows[0]), "KNOWN_COLUMNS must name every KnownClass field in order"
        print_table(
            list(KNOWN_COLUMNS.values()),
            [[_known_cell(k, r[k]) for k in keys] for r in rows],
            wide=wide,
        )
        return
    from workers.device import detect

    found: list[Fingerprint] = detect("auto")
    if json_out:
        print_json(
            {"devices": [{**f.to_dict(), "device_class": f.device_class.key} for f in found]}
        )
        return
    columns = [
        Column("index", short="#", justify="right"),
        Column("class"),
        Column("arch"),
        Column("backend"),
        Column("memory GiB", short="GiB", justify="right"),
        Column("SMs/CUs", justify="right"),
        Column("triton"),
        Column("torch"),
    ]
    print_table(
        columns,
        [
            [
                str(f.index),
                f.device_class.key,
                f.arch,
                f.backend.value,
                f"{f.memory_bytes / 2**30:.1f}",
                str(f.multiprocessors),
                f.triton or "-",
                f.torch or "-",
            ]
            for f in found
        ],
        wide=wide,
    )


def trial(
    kernel: KernelArgument,
    problem_text: Annotated[
        str, typer.Option("-p", "--problem", help="e.g. M=64,N=64,K=64,dtype=float16")
    ],
    config_text: Annotated[
        str,
        typer.Option("-c", "--config", help="'default' or NAME=VALUE,... (rest from the default)"),
    ] = "default",
    device: DeviceOption = "auto",
    reps: Annotated[int | None, typer.Option("--reps", min=1, help="Timed repetitions.")] = None,
    graph: Annotated[
        bool,
        typer.Option("--graph", help="Time per launch in a CUDA graph of launches back to back."),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Compile, check and time one config of a kernel on one problem in an isolated process
    (on a replayed device: the time its landscape recorded)."""
    from orchestrator.app.rates import rates
    from orchestrator.run.jobs import SourceKind
    from search_spaces import get_spec
    from workers.device import Backend, detect
    from workers.runner import RunnerOptions, TrialRequest, TrialRunner

    source = parse_device(device)
    spec = get_spec(kernel)
    problem = spec.parse_problem(problem_text)
    if source.kind is SourceKind.REPLAY:
        from workers.replay import ReplayRunner

        if graph or reps is not None:
            raise OrchestratorError(
                "--graph and --reps say how to time on a device; a replayed device answers with "
                "the time its landscape recorded: leave them out"
            )
        replay = ReplayRunner(source.paths)
        fingerprint, limits = replay.fingerprint, replay.limits
        config = resolve_config(spec, config_text, limits)
        m: Measurement = replay.run(TrialRequest(kernel=kernel, problem=problem, config=config))
    else:
        fingerprint = detect(source.kind.value)[0]
        limits = fingerprint.limits()
        config = resolve_config(spec, config_text, limits)
        overrides: dict[str, object] = (
            {"graph": graph} if reps is None else {"graph": graph, "reps": reps}
        )
        options = RunnerOptions.for_backend(fingerprint.backend, **overrides)
        with TrialRunner(options) as runner:
            m = runner.run(TrialRequest(kernel=kernel, problem=problem, config=config))
    rate = rates(spec, problem, m.median_ms)
    out = {
        "kernel": spec.name,
        "problem": problem,
        "config": config,
        "device_class": fingerprint.device_class.key,
        "backend": fingerprint.backend.value,
        **m.to_dict(),
        "tflops": rate.tflops,
        "gbps": rate.gbs,
    }
    if json_out:
        print_json(out)
    else:
        c = console()
        c.print(f"{spec.name} {problem} on {out['device_class']} ({fingerprint.backend.value})")
        c.print("config: " + ",".join(f"{k}={v}" for k, v in config.items()))
        c.print(f"outcome: [bold]{m.outcome.value}[/]" + (f"  ({m.error})" if m.error else ""))
        if m.median_ms is not None:
            c.print(
                f"median {m.median_ms:.4f} ms  IQR {m.iqr_ms:.4f} ms over {len(m.samples_ms)} reps; "
                f"{_rate(rate.tflops, '.2f')} TFLOP/s, {_rate(rate.gbs, '.1f')} GB/s; "
                f"compile {m.compile_s:.2f} s; "
                f"max rel error {m.max_rel_error:.2e}"
            )
        if fingerprint.backend is Backend.INTERPRETER:
            c.print("[dim]interpreter: times describe the CPU, not a GPU[/]")
        elif fingerprint.backend is Backend.REPLAY:
            c.print("[dim]replay: the time the landscape recorded, not measured now[/]")
    if m.outcome.value != "ok":
        raise typer.Exit(1)


def record(
    kernel: KernelArgument,
    problems: Annotated[list[str], typer.Option("-p", "--problem", help="A problem (repeatable).")],
    out: Annotated[
        Path,
        typer.Option("--out", help="Landscape file (.json/.json.gz), or a folder for several."),
    ],
    device: DeviceOption = "auto",
    compile_workers: Annotated[
        int | None,
        typer.Option("--compile-workers", min=0, help="Compile processes (default: cores - 2)."),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Only the first N valid configs.")
    ] = None,
    reps: Annotated[
        int | None, typer.Option("--reps", min=1, help="Timed repetitions per config.")
    ] = None,
    configs_file: Annotated[
        Path | None,
        typer.Option(
            "--configs",
            help="Time only these configs: a file with one NAME=VALUE,... per line "
            "(unnamed parameters from the default; # comments).",
        ),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option("--format", help="native (tunefleet landscape) or t4 (Kernel Tuner's T4)."),
    ] = "native",
) -> None:
    """Time every valid config of a kernel (or a given list) on this device and write a landscape
    file per problem."""
    import os

    from orchestrator.output import check_file
    from orchestrator.run.record import RecordPace, record_landscape, save_landscape
    from search_spaces import get_spec
    from workers.device import Backend, detect
    from workers.runner import RunnerOptions, TrialRunner

    source = check_device(device)
    if fmt not in ("native", "t4"):
        raise OrchestratorError(f"--format {fmt!r} is not native or t4")
    spec = get_spec(kernel)
    parsed = [spec.parse_problem(p) for p in problems]
    if len(parsed) > 1 and out.suffix in (".json", ".gz"):
        raise OrchestratorError(f"{len(parsed)} problems need a folder for --out, not {out}")
    targets = []
    for problem in parsed:
        suffix = ".t4.json" if fmt == "t4" else ".json.gz"
        name = "_".join([spec.name, *(f"{k}{v}" for k, v in problem.items())]) + suffix
        path = out if len(parsed) == 1 and out.suffix in (".json", ".gz") else out / name
        check_file(path)  # before anything is timed
        targets.append((problem, name, path))
    fingerprint = detect(source.kind.value)[0]
    chosen = (
        None if configs_file is None else read_configs(spec, configs_file, fingerprint.limits())
    )
    gpu = fingerprint.backend is not Backend.INTERPRETER
    workers = compile_workers if compile_workers is not None else max(1, (os.cpu_count() or 3) - 2)
    overrides: dict[str, object] = {"compile_workers": workers if gpu else 0}
    if reps is not None:
        overrides["reps"] = reps
    options = RunnerOptions.for_backend(fingerprint.backend, **overrides)
    c = console()
    signal.signal(signal.SIGTERM, _interrupt)
    with TrialRunner(options, fingerprint=fingerprint) as runner:
        for problem, name, path in targets:
            pace = RecordPace(time.perf_counter())

            def show(
                i: int, n: int, m: Measurement, label: str = name, on: RecordPace = pace
            ) -> None:
                on.add(m)
                if i == n or i % 50 == 0:
                    c.print(f"{label}: {i}/{n} configs, last {m.outcome.value}")

            landscape, complete = record_landscape(
                spec, kernel, problem, runner, fingerprint, limit, show, chosen
            )
            if fmt == "t4":
                from orchestrator.export.t4 import landscape_t4, write_json
                from orchestrator.output import write_atomically

                write_atomically(path, functools.partial(write_json, doc=landscape_t4(landscape)))
            else:
                save_landscape(path, landscape)
            best = landscape.best()
            c.print(
                f"wrote {path}: {len(landscape.results)} configs in "
                f"{time.perf_counter() - pace.start:.1f} s"
                + (f", best {best.time_ms:.4f} ms" if best and best.time_ms else "")
            )
            c.print(pace.summary(), soft_wrap=True)
            if not complete:
                c.print("[bold]interrupted[/]: the file holds the configs finished so far")
                raise typer.Exit(130)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


db_app = typer.Typer(help="Manage the config database.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Create the database or migrate it to the newest schema."""
    from db import Database

    database = Database(db)
    before, after = database.upgrade()
    if before is None:
        done = f"created at the newest schema ({after})"
    elif before == after:
        done = f"already at the newest schema ({after})"
    else:
        done = f"upgraded from revision {before} to {after}, the newest schema"
    console().print(f"database {database.url} {done}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command()(kernels)
    app.command()(space)
    app.command()(devices)
    app.command()(trial)
    app.command()(record)
    app.add_typer(db_app, name="db")

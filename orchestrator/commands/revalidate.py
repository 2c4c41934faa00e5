"""``tunefleet revalidate KERNEL --device-class C``: re-time stored bests here, flag regressions."""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated

import typer

from orchestrator.commands._common import (
    DbOption,
    DeviceOption,
    JsonOption,
    KernelArgument,
    check_device,
    console,
    open_database,
    print_json,
)
from orchestrator.errors import OrchestratorError
from orchestrator.run.revalidate import DEFAULT_THRESHOLD, Verdict, retune_arguments, revalidate
from search_spaces.registry import get_spec
from workers.device_table import canonical_class_key


def revalidate_command(
    kernel: KernelArgument,
    device_class: Annotated[
        str, typer.Option("--device-class", help="The class whose stored bests to re-time.")
    ],
    device: DeviceOption = "auto",
    threshold: Annotated[
        float, typer.Option(help="Re-timed / stored above this is a regression.")
    ] = DEFAULT_THRESHOLD,
    retune: Annotated[
        bool, typer.Option(help="Tune the regressed and failed problems again (tunefleet tune).")
    ] = False,
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Re-time the stored best configs of KERNEL on this machine's device (of class C) in the
    current environment; mark each holds, regressed or failed, naming what changed."""
    from workers.device import detect
    from workers.runner import RunnerOptions, TrialRequest, TrialRunner

    check_device(device)
    if threshold < 1:
        raise OrchestratorError(f"--threshold must be at least 1, got {threshold}")
    spec = get_spec(kernel)
    wanted = canonical_class_key(device_class)
    fingerprint = detect(device)[0]
    here = fingerprint.device_class.key
    if here.casefold() != wanted.casefold():
        raise OrchestratorError(
            f"this machine's device is {here}, not {wanted}: revalidate on a {wanted}"
        )
    current = {
        "triton": fingerprint.triton,
        "torch": fingerprint.torch,
        "driver": fingerprint.driver,
        "runtime": fingerprint.runtime,
    }
    database = open_database(db)
    options = RunnerOptions.for_backend(fingerprint.backend, compile_workers=0)
    with TrialRunner(options, fingerprint=fingerprint) as runner:
        found = revalidate(
            database,
            spec,
            here,
            current,
            lambda problem, config: runner.run(TrialRequest(kernel, problem, config)),
            threshold,
        )
    if json_out:
        print_json(
            {"kernel": spec.name, "device_class": here, "results": [r.to_dict() for r in found]}
        )
    else:
        from rich.table import Table

        table = Table(title=f"revalidate · {spec.name} · {here}")
        for column in ("problem", "config", "stored ms", "now ms", "ratio", "verdict", "changed"):
            table.add_column(column)
        for r in found:
            table.add_row(
                ",".join(f"{k}={v}" for k, v in r.problem.items()),
                ",".join(f"{k}={v}" for k, v in r.config.items()),
                f"{r.stored_ms:.4g}",
                "-" if r.now_ms is None else f"{r.now_ms:.4g}",
                "-" if r.ratio is None else f"{r.ratio:.3f}",
                r.verdict.value if r.error is None else f"{r.verdict.value}: {r.error}",
                "; ".join(r.changed) or "-",
            )
        console().print(table)
    stale = [r for r in found if r.verdict is not Verdict.HOLDS]
    if retune and stale:
        args = [*retune_arguments(kernel, here, stale), "--device", device]
        if db:
            args += ["--db", db]
        print(f"re-tuning {len(stale)} problem(s): tunefleet {' '.join(args)}", file=sys.stderr)
        raise typer.Exit(subprocess.call([sys.executable, "-m", "orchestrator", *args]))


def register(app: typer.Typer) -> None:
    app.command("revalidate")(revalidate_command)

"""``tunefleet revalidate KERNEL --device-class C``: re-time stored bests here, flag regressions
(through the door: on a database; a server refuses, see orchestrator.app.protocol)."""

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
    print_json,
)
from orchestrator.commands.remote import ServerOption, TokenFileOption, door_for
from orchestrator.run.revalidate import DEFAULT_THRESHOLD, Verdict, retune_arguments


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
    server: ServerOption = None,
    token_file: TokenFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Re-time the stored best configs of KERNEL on this machine's device (of class C) in the
    current environment; mark each holds, regressed or failed, naming what changed."""
    check_device(device)
    with door_for(server, token_file, db) as door:
        report = door.revalidate(kernel, device_class, device=device, threshold=threshold)
    found, here = report.results, report.device_class
    if json_out:
        print_json(report.to_dict())
    else:
        from rich.table import Table

        table = Table(title=f"revalidate · {report.kernel} · {here}")
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
